package io.cdcbridge.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF3;
import org.apache.spark.sql.types.StructType;

/**
 * A decoded RECORD_IMAGE envelope checked and turned into the fold's operation, compiled: what
 * cdcbridge/apply/operations.py checks of a RECORD_IMAGE message, and the operation struct of
 * cdcbridge/apply/spark_operations.py (OP_TYPE), in one pass instead of Spark SQL higher-order functions.
 *
 * <p>The image's columns become cells: a value is a PUT, a null without version a DELETE_ALL_VERSION, a null with
 * version a DELETE_ONE_VERSION (nulls only in a partial image). Arguments and result as {@link MutationOp}.
 */
public final class ImageOp extends EnvelopeFunction<ImageOp.Layout>
        implements UDF3<Row, Integer, Long, Row> {
    private static final long serialVersionUID = 1L;

    /** Where a RECORD_IMAGE envelope keeps its own fields, next to the shared ones. */
    static final class Layout {
        final Envelope.Layout common;
        final int columns;
        final int partial;
        final int columnValue;
        final int columnVersion;
        final Envelope.Union value;

        Layout(StructType envelope) {
            common = new Envelope.Layout(envelope);
            columns = envelope.fieldIndex("columns");
            partial = envelope.fieldIndex("partial");
            StructType column = Envelope.mapValues(envelope, columns);
            columnValue = column.fieldIndex("value");
            columnVersion = column.fieldIndex("version");
            value = new Envelope.Union(Envelope.struct(column, columnValue), Envelope.VALUE_MEMBERS);
        }
    }

    @Override
    Layout layout(StructType envelope) {
        return new Layout(envelope);
    }

    @Override
    Row operation(Row envelope, Layout at, Integer partition, Long offset) {
        Envelope.Head head = Envelope.head(envelope, at.common);
        if (head == null || envelope.isNullAt(at.columns)) {
            return null;
        }
        boolean deleted = Envelope.flag(envelope, at.common.rowDeleted);
        boolean partial = Envelope.flag(envelope, at.partial);
        Map<String, Row> columns = envelope.getJavaMap(at.columns);
        if (deleted && (partial || !columns.isEmpty())) {
            return null;
        }
        List<Row> cells = new ArrayList<>(columns.size());
        boolean writes = false;
        for (Map.Entry<String, Row> column : columns.entrySet()) {
            Row cell = column.getValue();
            if (column.getKey().isEmpty() || cell == null) {
                return null;
            }
            Row value = cell.isNullAt(at.columnValue) ? null : at.value.convert(cell.getStruct(at.columnValue));
            Long version = Envelope.optionalLong(cell, at.columnVersion);
            if (value == null && !partial) {
                return null;
            }
            String kind = value != null ? "PUT" : version == null ? "DELETE_ALL_VERSION" : "DELETE_ONE_VERSION";
            cells.add(RowFactory.create(column.getKey(), kind, value, version, null));
            writes |= value != null;
        }
        Row op = RowFactory.create(head.seqKey(), false, partition, offset, head.ts(), deleted, true, false, partial,
                writes, cells);
        return RowFactory.create(head.pk(), op);
    }
}
