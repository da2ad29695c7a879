package io.cdcbridge.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF3;
import org.apache.spark.sql.types.StructType;

/**
 * A decoded MUTATE_LOG envelope checked and turned into the fold's operation, compiled: what
 * cdcbridge/apply/operations.py checks of a MUTATE_LOG message, and the operation struct of
 * cdcbridge/apply/spark_operations.py (OP_TYPE), in one pass instead of Spark SQL higher-order functions.
 *
 * <p>Arguments: the envelope as from_avro decodes it into our reader schema, the Kafka partition and offset.
 * Result: {@code struct<pk, op>} (spark_operations.ENVELOPE_OP_TYPE), or null when the envelope breaks a rule
 * (the job leaves it to the reference path, which says what is wrong).
 */
public final class MutationOp extends EnvelopeFunction<MutationOp.Layout>
        implements UDF3<Row, Integer, Long, Row> {
    private static final long serialVersionUID = 1L;
    private static final Set<String> TYPES = Set.of("PUT", "UPDATE", "DELETE", "INCREMENT");
    private static final Set<String> CELL_OPS = Set.of("PUT", "DELETE_ONE_VERSION", "DELETE_ALL_VERSION", "INCREMENT");
    private static final int LONG_MEMBER = 1;

    /** Where a MUTATE_LOG envelope keeps its own fields, next to the shared ones. */
    static final class Layout {
        final Envelope.Layout common;
        final int type;
        final int replaceRow;
        final int cells;
        final int cellName;
        final int cellOp;
        final int cellValue;
        final int cellVersion;
        final int cellAmount;
        final Envelope.Union value;

        Layout(StructType envelope) {
            common = new Envelope.Layout(envelope);
            type = envelope.fieldIndex("type");
            replaceRow = envelope.fieldIndex("replace_row");
            cells = envelope.fieldIndex("cells");
            StructType cell = Envelope.elements(envelope, cells);
            cellName = cell.fieldIndex("name");
            cellOp = cell.fieldIndex("op");
            cellValue = cell.fieldIndex("value");
            cellVersion = cell.fieldIndex("version");
            cellAmount = cell.fieldIndex("amount");
            value = new Envelope.Union(Envelope.struct(cell, cellValue), Envelope.VALUE_MEMBERS);
        }
    }

    @Override
    Layout layout(StructType envelope) {
        return new Layout(envelope);
    }

    @Override
    Row operation(Row envelope, Layout at, Integer partition, Long offset) {
        Envelope.Head head = Envelope.head(envelope, at.common);
        String type = envelope.isNullAt(at.type) ? null : envelope.getString(at.type);
        if (head == null || !TYPES.contains(type) || envelope.isNullAt(at.cells)) {
            return null;
        }
        boolean deleted = Envelope.flag(envelope, at.common.rowDeleted);
        boolean replace = Envelope.flag(envelope, at.replaceRow);
        List<Row> cells = Envelope.list(envelope, at.cells);
        if (type.equals("DELETE") != deleted || (deleted && !cells.isEmpty()) || (replace && !type.equals("PUT"))) {
            return null;
        }
        List<Row> converted = new ArrayList<>(cells.size());
        boolean writes = false;
        for (Row cell : cells) {
            Row out = cell == null ? null : cell(cell, at, head.ts());
            if (out == null) {
                return null;
            }
            converted.add(out);
            writes |= isWrite(out.getString(1));
        }
        Row op = RowFactory.create(head.seqKey(), false, partition, offset, head.ts(), deleted, false, replace, false,
                writes, converted);
        return RowFactory.create(head.pk(), op);
    }

    /** One cell as spark_operations.CELL_TYPE (a PUT or INCREMENT without version takes the message's time, as
     * the reference fold does), or null when it breaks a rule. */
    private static Row cell(Row cell, Layout at, long ts) {
        String name = cell.isNullAt(at.cellName) ? null : cell.getString(at.cellName);
        String kind = cell.isNullAt(at.cellOp) ? null : cell.getString(at.cellOp);
        if (name == null || name.isEmpty() || !CELL_OPS.contains(kind)) {
            return null;
        }
        Row value = cell.isNullAt(at.cellValue) ? null : at.value.convert(cell.getStruct(at.cellValue));
        Long version = Envelope.optionalLong(cell, at.cellVersion);
        Long amount = Envelope.optionalLong(cell, at.cellAmount);
        boolean valid = switch (kind) {
            case "PUT" -> value != null && amount == null;
            case "DELETE_ONE_VERSION" -> version != null && amount == null;
            case "INCREMENT" -> value == null ? amount != null : !value.isNullAt(LONG_MEMBER);
            default -> amount == null;
        };
        if (!valid) {
            return null;
        }
        Long effective = isWrite(kind) && version == null ? Long.valueOf(ts) : version;
        return RowFactory.create(name, kind, value, effective, amount);
    }

    private static boolean isWrite(String kind) {
        return kind.equals("PUT") || kind.equals("INCREMENT");
    }
}
