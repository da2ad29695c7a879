package io.cdcbridge.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A decoded RECORD_IMAGE envelope checked and turned into the fold's operation, compiled: what
 * cdcbridge/apply/core/operations.py checks of a RECORD_IMAGE message, and the operation struct of
 * cdcbridge/apply/spark/operations.py (OP_TYPE), in one pass instead of Spark SQL higher-order functions.
 *
 * <p>The image's columns become cells: a value is a PUT, a null without version a DELETE_ALL_VERSION, a null with
 * version a DELETE_ONE_VERSION (nulls only in a partial image). Arguments and result as {@link MutationOp}.
 */
public final class ImageOp extends EnvelopeFunction<ImageOp.Layout> {
    private static final long serialVersionUID = 1L;
    // Names of cdcbridge/contract.py's CellOp values (tests/unit/test_contract.py checks them).
    private static final UTF8String PUT = UTF8String.fromString("PUT");
    private static final UTF8String DELETE_ONE_VERSION = UTF8String.fromString("DELETE_ONE_VERSION");
    private static final UTF8String DELETE_ALL_VERSION = UTF8String.fromString("DELETE_ALL_VERSION");

    /** Where a RECORD_IMAGE envelope keeps its own fields, next to the shared ones. */
    static final class Layout {
        final Envelope.Layout common;
        final int columns;
        final int columnFields;
        final int partial;
        final int columnValue;
        final int columnVersion;
        final Envelope.Union value;

        Layout(StructType envelope) {
            common = new Envelope.Layout(envelope);
            columns = envelope.fieldIndex("columns");
            partial = envelope.fieldIndex("partial");
            StructType column = Envelope.mapValues(envelope, columns);
            columnFields = column.fields().length;
            columnValue = column.fieldIndex("value");
            columnVersion = column.fieldIndex("version");
            value = new Envelope.Union(Envelope.struct(column, columnValue), Envelope.VALUE_MEMBERS, Envelope.VALUE_TYPES);
        }
    }

    public ImageOp(Expression[] arguments, DataType resultType) {
        super(arguments, resultType);
    }

    @Override
    Layout layout(StructType envelope) {
        return new Layout(envelope);
    }

    @Override
    InternalRow operation(InternalRow envelope, Layout at, Integer partition, Long offset) {
        Envelope.Head head = Envelope.head(envelope, at.common);
        if (head == null || envelope.isNullAt(at.columns)) {
            return null;
        }
        boolean deleted = Envelope.flag(envelope, at.common.rowDeleted);
        boolean partial = Envelope.flag(envelope, at.partial);
        MapData columns = envelope.getMap(at.columns);
        int count = columns.numElements();
        if (deleted && (partial || count > 0)) {
            return null;
        }
        ArrayData names = columns.keyArray();
        ArrayData values = columns.valueArray();
        Object[] cells = new Object[count];
        boolean writes = false;
        for (int i = 0; i < count; i++) {
            UTF8String name = names.getUTF8String(i);
            if (name.numBytes() == 0 || values.isNullAt(i)) {
                return null;
            }
            InternalRow cell = values.getStruct(i, at.columnFields);
            InternalRow value = cell.isNullAt(at.columnValue)
                    ? null : at.value.convert(cell.getStruct(at.columnValue, at.value.members()));
            Long version = Envelope.optionalLong(cell, at.columnVersion);
            if (value == null && !partial) {
                return null;
            }
            UTF8String kind = value != null ? PUT : version == null ? DELETE_ALL_VERSION : DELETE_ONE_VERSION;
            cells[i] = new GenericInternalRow(new Object[] {name, kind, value, version, null});
            writes |= value != null;
        }
        InternalRow op = new GenericInternalRow(new Object[] {
            head.seqKey(), false, partition, offset, head.ts(), deleted, true, false, partial, writes,
            new GenericArrayData(cells)});
        return new GenericInternalRow(new Object[] {head.pk(), op});
    }
}
