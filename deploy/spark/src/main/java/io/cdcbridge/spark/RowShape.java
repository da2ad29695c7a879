package io.cdcbridge.spark;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF2;

import scala.collection.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * What a folded row looks like to its target, compiled: the names and value types of its attribute columns and
 * of its primary key, and whether two of its column names differ only in case. The apply job collects these per
 * table before writing (cdcbridge/apply/spark_batch.py), so the target can add columns or refuse the batch first.
 *
 * <p>Arguments: the row's key (spark_operations.PK_TYPE) and its columns (spark_fold.COLUMNS_TYPE). Result:
 * spark_batch.SHAPE_TYPE. Type names are Spark's: boolean, bigint, double, string, binary.
 */
public final class RowShape implements UDF2<Seq<Row>, scala.collection.Map<String, Row>, Row> {
    private static final long serialVersionUID = 1L;
    /** Type of each field of the value union (z, l, d, s, b); the primary-key union is (l, s, b). */
    private static final String[] VALUE_TYPES = {"boolean", "bigint", "double", "string", "binary"};
    private static final String[] PK_TYPES = {"bigint", "string", "binary"};

    @Override
    public Row call(Seq<Row> pk, scala.collection.Map<String, Row> cols) {
        List<Row> pkShape = new ArrayList<>();
        if (pk != null) {
            for (Row item : CollectionConverters.asJava(pk)) {
                pkShape.add(RowFactory.create(item.getString(0), typeOf(item.getStruct(1), PK_TYPES)));
            }
        }
        List<Row> columns = new ArrayList<>();
        boolean caseConflict = false;
        if (cols != null) {
            Map<String, Row> named = CollectionConverters.asJava(cols);
            Set<String> lowered = new HashSet<>();
            for (Map.Entry<String, Row> column : named.entrySet()) {
                Row cell = column.getValue();
                String type = typeOf(cell == null ? null : cell.getStruct(0), VALUE_TYPES);
                columns.add(RowFactory.create(column.getKey(), type));
                caseConflict |= !lowered.add(column.getKey().toLowerCase(Locale.ROOT));
            }
        }
        return RowFactory.create(columns, pkShape, caseConflict);
    }

    /** The type of the union's first set field; the last type when none is set (as the SQL CASE it replaces). */
    private static String typeOf(Row union, String[] types) {
        if (union != null) {
            for (int field = 0; field < types.length - 1; field++) {
                if (!union.isNullAt(field)) {
                    return types[field];
                }
            }
        }
        return types[types.length - 1];
    }
}
