package io.cdcbridge.spark;

import java.util.HashSet;
import java.util.List;
import java.util.Set;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * What both envelope formats share, for {@link MutationOp} and {@link ImageOp}: where a decoded envelope keeps
 * its fields, the checks of cdcbridge/apply/core/operations.py's envelope reader (table, primary key, seq, timestamp)
 * and the value unions in the shapes of cdcbridge/apply/spark/operations.py, on Spark's own values.
 *
 * <p>Fields are found by name once per struct type (from_avro decodes into our reader schema, which evolves by
 * adding fields), and every check errs on the strict side: an envelope these refuse goes to the reference path,
 * which judges it exactly.
 */
final class Envelope {
    // The seq_key layout of cdcbridge/contract.py (SEQ_KEY_FORMAT "%010d%020d%010d%06d", SEQ_NUMBERS, SEQ_KEY_LENGTH);
    // tests/unit/test_contract.py checks these three against it.
    /** Widths of the zero-padded seq numbers in seq_key. */
    private static final int[] SEQ_WIDTHS = {10, 20, 10, 6};
    private static final String[] SEQ_NUMBERS = {"epoch", "timestamp_us", "row_index", "op_index"};
    private static final int SEQ_KEY_LENGTH = 46;
    private static final long MICROS_PER_MILLI = 1000L;
    /** Avro union members in the order of spark.operations.VALUE_UNION (z, l, d, s, b) and PK_UNION (l, s, b),
     * with the Spark type of each. */
    static final String[] VALUE_MEMBERS = {
        "member_boolean", "member_long", "member_double", "member_string", "member_bytes"};
    static final DataType[] VALUE_TYPES = {
        DataTypes.BooleanType, DataTypes.LongType, DataTypes.DoubleType, DataTypes.StringType, DataTypes.BinaryType};
    private static final String[] PK_MEMBERS = {"member_long", "member_string", "member_bytes"};
    private static final DataType[] PK_TYPES = {DataTypes.LongType, DataTypes.StringType, DataTypes.BinaryType};

    private Envelope() {
    }

    /** Where an envelope struct type keeps the fields both formats share. */
    static final class Layout {
        final int source;
        final int sourceFields;
        final int table;
        final int seq;
        final int seqFields;
        final int seqKey;
        final int[] seqNumbers = new int[SEQ_NUMBERS.length];
        /** The commit time's field, or -1 when it is no timestamp (then no envelope passes). */
        final int timestamp;
        final int pk;
        final int pkItemFields;
        final int pkName;
        final int pkValue;
        final Union pkUnion;
        final int rowDeleted;

        Layout(StructType type) {
            source = type.fieldIndex("source");
            StructType sourceType = struct(type, source);
            sourceFields = sourceType.fields().length;
            table = sourceType.fieldIndex("table");
            seq = type.fieldIndex("seq");
            StructType seqType = struct(type, seq);
            seqFields = seqType.fields().length;
            seqKey = seqType.fieldIndex("seq_key");
            for (int number = 0; number < SEQ_NUMBERS.length; number++) {
                seqNumbers[number] = seqType.fieldIndex(SEQ_NUMBERS[number]);
            }
            int time = type.fieldIndex("timestamp");
            timestamp = type.fields()[time].dataType().equals(DataTypes.TimestampType) ? time : -1;
            pk = type.fieldIndex("pk");
            StructType pkItem = elements(type, pk);
            pkItemFields = pkItem.fields().length;
            pkName = pkItem.fieldIndex("name");
            pkValue = pkItem.fieldIndex("value");
            pkUnion = new Union(struct(pkItem, pkValue), PK_MEMBERS, PK_TYPES);
            rowDeleted = type.fieldIndex("row_deleted");
        }
    }

    /** What every valid envelope carries besides its own fields: its row's key, its seq_key and its time. */
    record Head(ArrayData pk, UTF8String seqKey, long ts) {
    }

    /** The envelope's {@link Head}, or null when its table, key, seq or timestamp breaks a rule. */
    static Head head(InternalRow envelope, Layout at) {
        ArrayData pk = table(envelope, at) == null ? null : primaryKey(envelope, at);
        UTF8String seqKey = pk == null ? null : seqKey(envelope, at);
        Long ts = seqKey == null ? null : timestampMillis(envelope, at);
        return ts == null ? null : new Head(pk, seqKey, ts);
    }

    /** An Avro union decoded as a struct of members, converted to one of our unions by member name. */
    static final class Union {
        private final int[] target;
        private final DataType[] types;
        private final int width;

        Union(StructType members, String[] ours, DataType[] ourTypes) {
            width = ours.length;
            target = new int[members.fields().length];
            types = new DataType[target.length];
            for (int field = 0; field < target.length; field++) {
                target[field] = List.of(ours).indexOf(members.fields()[field].name());
                types[field] = members.fields()[field].dataType();
                if (target[field] >= 0 && !types[field].equals(ourTypes[target[field]])) {
                    throw new IllegalArgumentException("union member " + members.fields()[field].name() + " has type "
                            + types[field].simpleString() + ", expected " + ourTypes[target[field]].simpleString());
                }
            }
        }

        /** The number of members (the width of the decoded struct). */
        int members() {
            return target.length;
        }

        /** Our union of the member that is set, or null when none is (an absent value). */
        InternalRow convert(InternalRow members) {
            if (members == null) {
                return null;
            }
            Object[] out = null;
            for (int field = 0; field < target.length; field++) {
                if (target[field] >= 0 && !members.isNullAt(field)) {
                    if (out == null) {
                        out = new Object[width];
                    }
                    out[target[field]] = members.get(field, types[field]);
                }
            }
            return out == null ? null : new GenericInternalRow(out);
        }
    }

    static StructType struct(StructType type, int field) {
        return (StructType) type.fields()[field].dataType();
    }

    static StructType elements(StructType type, int field) {
        return (StructType) ((ArrayType) type.fields()[field].dataType()).elementType();
    }

    static StructType mapValues(StructType type, int field) {
        return (StructType) ((MapType) type.fields()[field].dataType()).valueType();
    }

    /** A boolean field; null counts as false (the Avro default). */
    static boolean flag(InternalRow row, int field) {
        return !row.isNullAt(field) && row.getBoolean(field);
    }

    static Long optionalLong(InternalRow row, int field) {
        return row.isNullAt(field) ? null : row.getLong(field);
    }

    static UTF8String optionalString(InternalRow row, int field) {
        return row.isNullAt(field) ? null : row.getUTF8String(field);
    }

    /** The source table, or null unless it is a non-empty name. */
    static UTF8String table(InternalRow envelope, Layout at) {
        InternalRow source = envelope.isNullAt(at.source) ? null : envelope.getStruct(at.source, at.sourceFields);
        UTF8String table = source == null ? null : optionalString(source, at.table);
        return table == null || table.numBytes() == 0 ? null : table;
    }

    /** The primary key as spark.operations.PK_TYPE, or null unless every column has a non-empty name of its own
     * and a value. */
    static ArrayData primaryKey(InternalRow envelope, Layout at) {
        if (envelope.isNullAt(at.pk)) {
            return null;
        }
        ArrayData items = envelope.getArray(at.pk);
        int count = items.numElements();
        if (count == 0) {
            return null;
        }
        Object[] pk = new Object[count];
        Set<UTF8String> names = count > 1 ? new HashSet<>() : null;
        for (int i = 0; i < count; i++) {
            InternalRow item = items.isNullAt(i) ? null : items.getStruct(i, at.pkItemFields);
            UTF8String name = item == null ? null : optionalString(item, at.pkName);
            InternalRow value = name == null || name.numBytes() == 0 || item.isNullAt(at.pkValue)
                    ? null : at.pkUnion.convert(item.getStruct(at.pkValue, at.pkUnion.members()));
            if (value == null || (names != null && !names.add(name))) {
                return null;
            }
            pk[i] = new GenericInternalRow(new Object[] {name, value});
        }
        return new GenericArrayData(pk);
    }

    /** The seq_key, or null unless it is SEQ_KEY_LENGTH digits that spell the seq's numbers (each non-negative and
     * as wide as its field at most; a seq with a missing number is checked on its digits alone). */
    static UTF8String seqKey(InternalRow envelope, Layout at) {
        InternalRow seq = envelope.isNullAt(at.seq) ? null : envelope.getStruct(at.seq, at.seqFields);
        UTF8String key = seq == null ? null : optionalString(seq, at.seqKey);
        if (key == null || key.numBytes() != SEQ_KEY_LENGTH) {
            return null;
        }
        for (int index = 0; index < SEQ_KEY_LENGTH; index++) {
            byte digit = key.getByte(index);
            if (digit < '0' || digit > '9') {
                return null;
            }
        }
        boolean complete = true;
        for (int number : at.seqNumbers) {
            if (seq.isNullAt(number)) {
                complete = false;
            } else if (seq.getLong(number) < 0) {
                return null;
            }
        }
        if (!complete) {
            return key;
        }
        int end = 0;
        for (int number = 0; number < SEQ_WIDTHS.length; number++) {
            long rest = seq.getLong(at.seqNumbers[number]);
            int start = end;
            end += SEQ_WIDTHS[number];
            // The field's digits from the right must spell the number, zero-padded on the left.
            for (int index = end - 1; index >= start; index--) {
                if (key.getByte(index) != '0' + rest % 10) {
                    return null;
                }
                rest /= 10;
            }
            if (rest != 0) {
                return null;  // wider than its field
            }
        }
        return key;
    }

    /** The commit time in milliseconds (what SQL's unix_millis gives), or null when absent. */
    static Long timestampMillis(InternalRow envelope, Layout at) {
        if (at.timestamp < 0 || envelope.isNullAt(at.timestamp)) {
            return null;
        }
        return Math.floorDiv(envelope.getLong(at.timestamp), MICROS_PER_MILLI);
    }
}
