package io.cdcbridge.spark;

import java.sql.Timestamp;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.function.Function;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StructType;

import scala.jdk.javaapi.CollectionConverters;

/**
 * What both envelope formats share, for {@link MutationOp} and {@link ImageOp}: where a decoded envelope keeps
 * its fields, the checks of cdcbridge/apply/operations.py's envelope reader (table, primary key, seq, timestamp)
 * and the value unions in the shapes of cdcbridge/apply/spark_operations.py.
 *
 * <p>Fields are found by name once per struct type (from_avro decodes into our reader schema, which evolves by
 * adding fields), and every check errs on the strict side: an envelope these refuse goes to the reference path,
 * which judges it exactly.
 */
final class Envelope {
    /** Widths of the zero-padded seq numbers in seq_key (formats/common.py SEQ_KEY_FORMAT: %010d%020d%010d%06d). */
    private static final int[] SEQ_WIDTHS = {10, 20, 10, 6};
    private static final String[] SEQ_NUMBERS = {"epoch", "timestamp_us", "row_index", "op_index"};
    private static final int SEQ_KEY_LENGTH = 46;
    /** Avro union members in the order of spark_operations.VALUE_UNION (z, l, d, s, b) and PK_UNION (l, s, b). */
    static final String[] VALUE_MEMBERS = {
        "member_boolean", "member_long", "member_double", "member_string", "member_bytes"};
    private static final String[] PK_MEMBERS = {"member_long", "member_string", "member_bytes"};

    private Envelope() {
    }

    /** Where an envelope struct type keeps the fields both formats share. */
    static final class Layout {
        final int source;
        final int table;
        final int seq;
        final int seqKey;
        final int[] seqNumbers = new int[SEQ_NUMBERS.length];
        final int timestamp;
        final int pk;
        final int pkName;
        final int pkValue;
        final Union pkUnion;
        final int rowDeleted;

        Layout(StructType type) {
            source = type.fieldIndex("source");
            table = struct(type, source).fieldIndex("table");
            seq = type.fieldIndex("seq");
            StructType seqType = struct(type, seq);
            seqKey = seqType.fieldIndex("seq_key");
            for (int number = 0; number < SEQ_NUMBERS.length; number++) {
                seqNumbers[number] = seqType.fieldIndex(SEQ_NUMBERS[number]);
            }
            timestamp = type.fieldIndex("timestamp");
            pk = type.fieldIndex("pk");
            StructType pkItem = elements(type, pk);
            pkName = pkItem.fieldIndex("name");
            pkValue = pkItem.fieldIndex("value");
            pkUnion = new Union(struct(pkItem, pkValue), PK_MEMBERS);
            rowDeleted = type.fieldIndex("row_deleted");
        }
    }

    /** A UDF's layout of the last envelope type it saw, built again only when the type changes (compared by
     * reference first: every envelope of a column shares one type object). */
    static final class Layouts<L> {
        private final Function<StructType, L> build;
        private StructType type;
        private L layout;

        Layouts(Function<StructType, L> build) {
            this.build = build;
        }

        L of(StructType envelope) {
            if (layout == null || !(type == envelope || type.equals(envelope))) {
                layout = build.apply(envelope);
                type = envelope;
            }
            return layout;
        }
    }

    /** What every valid envelope carries besides its own fields: its row's key, its seq_key and its time. */
    record Head(List<Row> pk, String seqKey, long ts) {
    }

    /** The envelope's {@link Head}, or null when its table, key, seq or timestamp breaks a rule. */
    static Head head(Row envelope, Layout at) {
        List<Row> pk = table(envelope, at) == null ? null : primaryKey(envelope, at);
        String seqKey = pk == null ? null : seqKey(envelope, at);
        Long ts = seqKey == null ? null : timestampMillis(envelope, at);
        return ts == null ? null : new Head(pk, seqKey, ts);
    }

    /** An Avro union decoded as a struct of members, converted to one of our unions by member name. */
    static final class Union {
        private final int[] target;
        private final int width;

        Union(StructType members, String[] ours) {
            width = ours.length;
            target = new int[members.fields().length];
            for (int field = 0; field < target.length; field++) {
                target[field] = List.of(ours).indexOf(members.fields()[field].name());
            }
        }

        /** Our union of the member that is set, or null when none is (an absent value). */
        Row convert(Row members) {
            if (members == null) {
                return null;
            }
            Object[] out = null;
            for (int field = 0; field < target.length; field++) {
                if (target[field] >= 0 && !members.isNullAt(field)) {
                    if (out == null) {
                        out = new Object[width];
                    }
                    out[target[field]] = members.get(field);
                }
            }
            return out == null ? null : RowFactory.create(out);
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
    static boolean flag(Row row, int field) {
        return !row.isNullAt(field) && row.getBoolean(field);
    }

    static Long optionalLong(Row row, int field) {
        return row.isNullAt(field) ? null : row.getLong(field);
    }

    static <T> List<T> list(Row row, int field) {
        return CollectionConverters.asJava(row.<T>getSeq(field));
    }

    /** The source table, or null unless it is a non-empty name. */
    static String table(Row envelope, Layout at) {
        Row source = envelope.isNullAt(at.source) ? null : envelope.getStruct(at.source);
        String table = source == null || source.isNullAt(at.table) ? null : source.getString(at.table);
        return table == null || table.isEmpty() ? null : table;
    }

    /** The primary key as spark_operations.PK_TYPE, or null unless every column has a non-empty name of its own
     * and a value. */
    static List<Row> primaryKey(Row envelope, Layout at) {
        if (envelope.isNullAt(at.pk)) {
            return null;
        }
        List<Row> items = list(envelope, at.pk);
        if (items.isEmpty()) {
            return null;
        }
        List<Row> pk = new ArrayList<>(items.size());
        Set<String> names = items.size() > 1 ? new HashSet<>() : null;
        for (Row item : items) {
            String name = item == null || item.isNullAt(at.pkName) ? null : item.getString(at.pkName);
            Row value = name == null || name.isEmpty() || item.isNullAt(at.pkValue)
                    ? null : at.pkUnion.convert(item.getStruct(at.pkValue));
            if (value == null || (names != null && !names.add(name))) {
                return null;
            }
            pk.add(RowFactory.create(name, value));
        }
        return pk;
    }

    /** The seq_key, or null unless it is 46 digits that spell the seq's numbers (each non-negative and as wide
     * as its field at most; a seq with a missing number is checked on its digits alone). */
    static String seqKey(Row envelope, Layout at) {
        Row seq = envelope.isNullAt(at.seq) ? null : envelope.getStruct(at.seq);
        String key = seq == null || seq.isNullAt(at.seqKey) ? null : seq.getString(at.seqKey);
        if (key == null || key.length() != SEQ_KEY_LENGTH) {
            return null;
        }
        for (int index = 0; index < SEQ_KEY_LENGTH; index++) {
            char digit = key.charAt(index);
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
        int start = 0;
        for (int number = 0; number < SEQ_WIDTHS.length; number++) {
            String digits = Long.toString(seq.getLong(at.seqNumbers[number]));
            int padding = SEQ_WIDTHS[number] - digits.length();
            if (padding < 0) {
                return null;
            }
            for (int index = start; index < start + padding; index++) {
                if (key.charAt(index) != '0') {
                    return null;
                }
            }
            if (!key.regionMatches(start + padding, digits, 0, digits.length())) {
                return null;
            }
            start += SEQ_WIDTHS[number];
        }
        return key;
    }

    /** The commit time in milliseconds (what SQL's unix_millis gives), or null when absent. */
    static Long timestampMillis(Row envelope, Layout at) {
        Object value = envelope.isNullAt(at.timestamp) ? null : envelope.get(at.timestamp);
        if (value instanceof Timestamp timestamp) {
            return timestamp.getTime();
        }
        if (value instanceof Instant instant) {
            return instant.toEpochMilli();
        }
        return null;
    }
}
