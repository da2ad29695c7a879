package io.cdcbridge.spark;

import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

import scala.jdk.javaapi.CollectionConverters;

/**
 * A stored Delta row as the fold's current state, compiled: the apply job reads the rows of a batch's keys and
 * hands each to {@link FoldRow} in this shape (cdcbridge/apply/spark_fold.py STATE_TYPE).
 *
 * <p>Argument: a struct of the table's attribute columns (typed: boolean, bigint, double, string, binary), then
 * {@code _versions}, {@code _deleted}, {@code _seq} and {@code _source_ts}, as cdcbridge/apply/targets/delta.py
 * lays a table out. Result: {@code cols} (each non-null attribute as its value union and version),
 * {@code del}, {@code seq}, {@code ts}.
 */
public final class RowState implements UDF1<Row, Row> {
    private static final long serialVersionUID = 1L;

    /** Where a table layout keeps what; computed once per layout (every row of a table shares one). */
    private record Layout(StructType schema, String[] names, int[] unionFields, int versions, int deleted, int seq,
                          int ts) {
    }

    private transient Layout layout;

    @Override
    public Row call(Row stored) {
        if (stored == null) {
            return null;
        }
        Layout at = layoutOf(stored.schema());
        Map<String, Object> versions = stored.isNullAt(at.versions())
                ? Map.of() : CollectionConverters.asJava(stored.<String, Object>getMap(at.versions()));
        Map<String, Row> cols = new LinkedHashMap<>();
        for (int field = 0; field < at.names().length; field++) {
            if (stored.isNullAt(field)) {
                continue;
            }
            Object[] union = new Object[5];
            union[at.unionFields()[field]] = stored.get(field);
            cols.put(at.names()[field], RowFactory.create(RowFactory.create(union), versions.get(at.names()[field])));
        }
        return RowFactory.create(
                cols,
                !stored.isNullAt(at.deleted()) && stored.getBoolean(at.deleted()),
                stored.isNullAt(at.seq()) ? null : stored.getString(at.seq()),
                stored.isNullAt(at.ts()) ? null : stored.getLong(at.ts()));
    }

    private Layout layoutOf(StructType schema) {
        Layout known = layout;
        // Every row of a table carries the same schema object: compare by reference before comparing fields.
        if (known != null && (known.schema() == schema || known.schema().equals(schema))) {
            return known;
        }
        int attributes = schema.fields().length - 4;
        String[] names = new String[attributes];
        int[] unionFields = new int[attributes];
        for (int field = 0; field < attributes; field++) {
            names[field] = schema.fields()[field].name();
            unionFields[field] = unionField(names[field], schema.fields()[field].dataType());
        }
        known = new Layout(schema, names, unionFields, schema.fieldIndex("_versions"), schema.fieldIndex("_deleted"),
                schema.fieldIndex("_seq"), schema.fieldIndex("_source_ts"));
        layout = known;
        return known;
    }

    /** The field of the value union (z, l, d, s, b) that holds a column of this type. */
    private static int unionField(String column, DataType type) {
        if (type.equals(DataTypes.BooleanType)) {
            return 0;
        } else if (type.equals(DataTypes.LongType)) {
            return 1;
        } else if (type.equals(DataTypes.DoubleType)) {
            return 2;
        } else if (type.equals(DataTypes.StringType)) {
            return 3;
        } else if (type.equals(DataTypes.BinaryType)) {
            return 4;
        }
        throw new IllegalArgumentException("column " + column + " has type " + type.simpleString()
                + ", which no Tablestore column type maps to");
    }
}
