package io.cdcbridge.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A decoded MUTATE_LOG envelope checked and turned into the fold's operation, compiled: what
 * cdcbridge/apply/core/operations.py checks of a MUTATE_LOG message, and the operation struct of
 * cdcbridge/apply/spark/operations.py (OP_TYPE), in one pass instead of Spark SQL higher-order functions.
 *
 * <p>Arguments: the envelope as from_avro decodes it into our reader schema, the Kafka partition and offset.
 * Result: {@code struct<pk, op>} (spark.operations.ENVELOPE_OP_TYPE), or null when the envelope breaks a rule
 * (the job leaves it to the reference path, which says what is wrong).
 */
public final class MutationOp extends EnvelopeFunction<MutationOp.Layout> {
    private static final long serialVersionUID = 1L;
    // Names of cdcbridge/contract.py's MutationType and CellOp values (tests/unit/test_contract.py checks them).
    private static final UTF8String PUT = UTF8String.fromString("PUT");
    private static final UTF8String UPDATE = UTF8String.fromString("UPDATE");
    private static final UTF8String DELETE = UTF8String.fromString("DELETE");
    private static final UTF8String INCREMENT = UTF8String.fromString("INCREMENT");
    private static final UTF8String DELETE_ONE_VERSION = UTF8String.fromString("DELETE_ONE_VERSION");
    private static final UTF8String DELETE_ALL_VERSION = UTF8String.fromString("DELETE_ALL_VERSION");
    private static final int LONG_MEMBER = 1;

    /** Where a MUTATE_LOG envelope keeps its own fields, next to the shared ones. */
    static final class Layout {
        final Envelope.Layout common;
        final int type;
        final int replaceRow;
        final int cells;
        final int cellFields;
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
            cellFields = cell.fields().length;
            cellName = cell.fieldIndex("name");
            cellOp = cell.fieldIndex("op");
            cellValue = cell.fieldIndex("value");
            cellVersion = cell.fieldIndex("version");
            cellAmount = cell.fieldIndex("amount");
            value = new Envelope.Union(Envelope.struct(cell, cellValue), Envelope.VALUE_MEMBERS, Envelope.VALUE_TYPES);
        }
    }

    public MutationOp(Expression[] arguments, DataType resultType) {
        super(arguments, resultType);
    }

    @Override
    Layout layout(StructType envelope) {
        return new Layout(envelope);
    }

    @Override
    InternalRow operation(InternalRow envelope, Layout at, Integer partition, Long offset) {
        Envelope.Head head = Envelope.head(envelope, at.common);
        UTF8String type = Envelope.optionalString(envelope, at.type);
        boolean known = PUT.equals(type) || UPDATE.equals(type) || DELETE.equals(type) || INCREMENT.equals(type);
        if (head == null || !known || envelope.isNullAt(at.cells)) {
            return null;
        }
        boolean deleted = Envelope.flag(envelope, at.common.rowDeleted);
        boolean replace = Envelope.flag(envelope, at.replaceRow);
        ArrayData cells = envelope.getArray(at.cells);
        int count = cells.numElements();
        if (DELETE.equals(type) != deleted || (deleted && count > 0) || (replace && !PUT.equals(type))) {
            return null;
        }
        Object[] converted = new Object[count];
        boolean writes = false;
        for (int i = 0; i < count; i++) {
            InternalRow out = cells.isNullAt(i) ? null : cell(cells.getStruct(i, at.cellFields), at, head.ts());
            if (out == null) {
                return null;
            }
            converted[i] = out;
            writes |= isWrite(out.getUTF8String(1));
        }
        InternalRow op = new GenericInternalRow(new Object[] {
            head.seqKey(), false, partition, offset, head.ts(), deleted, false, replace, false, writes,
            new GenericArrayData(converted)});
        return new GenericInternalRow(new Object[] {head.pk(), op});
    }

    /** One cell as spark.operations.CELL_TYPE (a PUT or INCREMENT without version takes the message's time, as
     * the reference fold does), or null when it breaks a rule. */
    private static InternalRow cell(InternalRow cell, Layout at, long ts) {
        UTF8String name = Envelope.optionalString(cell, at.cellName);
        UTF8String kind = Envelope.optionalString(cell, at.cellOp);
        if (name == null || name.numBytes() == 0 || kind == null) {
            return null;
        }
        InternalRow value = cell.isNullAt(at.cellValue)
                ? null : at.value.convert(cell.getStruct(at.cellValue, at.value.members()));
        Long version = Envelope.optionalLong(cell, at.cellVersion);
        Long amount = Envelope.optionalLong(cell, at.cellAmount);
        boolean valid;
        if (PUT.equals(kind)) {
            valid = value != null && amount == null;
        } else if (DELETE_ONE_VERSION.equals(kind)) {
            valid = version != null && amount == null;
        } else if (INCREMENT.equals(kind)) {
            valid = value == null ? amount != null : !value.isNullAt(LONG_MEMBER);
        } else if (DELETE_ALL_VERSION.equals(kind)) {
            valid = amount == null;
        } else {
            return null;
        }
        if (!valid) {
            return null;
        }
        Long effective = isWrite(kind) && version == null ? Long.valueOf(ts) : version;
        return new GenericInternalRow(new Object[] {name, kind, value, effective, amount});
    }

    private static boolean isWrite(UTF8String kind) {
        return PUT.equals(kind) || INCREMENT.equals(kind);
    }
}
