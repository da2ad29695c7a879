package io.cdcbridge.spark;

import java.util.HashMap;
import java.util.Map;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayBasedMapData;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A stored Delta row as the fold's current state, compiled: the apply job reads the rows of a batch's keys and
 * hands each to {@link FoldRow} in this shape (cdcbridge/apply/spark/fold.py STATE_TYPE), as a Catalyst
 * expression on Spark's own values ({@link KernelExpression}).
 *
 * <p>Argument: a struct of the table's attribute columns (typed: boolean, bigint, double, string, binary), then
 * {@code _versions}, {@code _deleted}, {@code _seq} and {@code _source_ts}, as cdcbridge/apply/targets/delta.py
 * lays a table out; a cell's version is its own entry in {@code _versions}, else the row's common version (the
 * empty key, {@link RowVersions}). Result: {@code cols} (each non-null attribute as its value union and version),
 * {@code del}, {@code seq}, {@code ts}. Values are returned as they are read: Spark copies the result before it
 * reads the next row.
 */
public final class RowState extends KernelExpression {
    private static final long serialVersionUID = 1L;
    private static final int VALUE_FIELDS = 5;

    /** Where the argument's struct type keeps what; worked out on the first row. */
    private record Layout(UTF8String[] names, DataType[] types, int[] unionFields,
                          Map<UTF8String, Integer> attributeIndex, int versions, int deleted, int seq, int ts) {
    }

    private transient Layout layout;

    public RowState(Expression[] arguments, DataType resultType) {
        super(arguments, 1, resultType);
    }

    @Override
    public Object compute(Object[] values) {
        InternalRow stored = (InternalRow) values[0];
        if (stored == null) {
            return null;
        }
        Layout at = layout();
        int attributes = at.names().length;
        Long[] versions = new Long[attributes];
        if (!stored.isNullAt(at.versions())) {
            MapData map = stored.getMap(at.versions());
            ArrayData keys = map.keyArray();
            ArrayData versionValues = map.valueArray();
            boolean[] named = new boolean[attributes];
            Long common = null;
            for (int i = 0; i < map.numElements(); i++) {
                UTF8String key = keys.getUTF8String(i);
                Long version = versionValues.isNullAt(i) ? null : versionValues.getLong(i);
                Integer attribute = at.attributeIndex().get(key);
                if (attribute != null) {
                    versions[attribute] = version;
                    named[attribute] = true;
                } else if (key.equals(RowVersions.COMMON_VERSION_KEY)) {
                    common = version;
                }
            }
            for (int attribute = 0; common != null && attribute < attributes; attribute++) {
                if (!named[attribute]) {
                    versions[attribute] = common;
                }
            }
        }
        int set = 0;
        for (int field = 0; field < attributes; field++) {
            if (!stored.isNullAt(field)) {
                set++;
            }
        }
        Object[] names = new Object[set];
        Object[] cells = new Object[set];
        int cell = 0;
        for (int field = 0; field < attributes; field++) {
            if (stored.isNullAt(field)) {
                continue;
            }
            Object[] union = new Object[VALUE_FIELDS];
            union[at.unionFields()[field]] = stored.get(field, at.types()[field]);
            names[cell] = at.names()[field];
            cells[cell] = new GenericInternalRow(new Object[] {new GenericInternalRow(union), versions[field]});
            cell++;
        }
        return new GenericInternalRow(new Object[] {
            new ArrayBasedMapData(new GenericArrayData(names), new GenericArrayData(cells)),
            !stored.isNullAt(at.deleted()) && stored.getBoolean(at.deleted()),
            stored.isNullAt(at.seq()) ? null : stored.getUTF8String(at.seq()),
            stored.isNullAt(at.ts()) ? null : stored.getLong(at.ts())});
    }

    private Layout layout() {
        Layout known = layout;
        if (known == null) {
            known = layoutOf((StructType) argument(0).dataType());
            layout = known;
        }
        return known;
    }

    private static Layout layoutOf(StructType schema) {
        int attributes = schema.fields().length - 4;
        UTF8String[] names = new UTF8String[attributes];
        DataType[] types = new DataType[attributes];
        int[] unionFields = new int[attributes];
        Map<UTF8String, Integer> attributeIndex = new HashMap<>();
        for (int field = 0; field < attributes; field++) {
            StructField column = schema.fields()[field];
            names[field] = UTF8String.fromString(column.name());
            types[field] = column.dataType();
            unionFields[field] = unionField(column.name(), column.dataType());
            attributeIndex.put(names[field], field);
        }
        return new Layout(names, types, unionFields, attributeIndex,
                schema.fieldIndex("_versions"), schema.fieldIndex("_deleted"), schema.fieldIndex("_seq"),
                schema.fieldIndex("_source_ts"));
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
