package io.cdcbridge.spark;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF2;

import scala.collection.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The apply job's fold of one target row, compiled: what cdcbridge/apply/fold.py does, on the operation structs
 * of cdcbridge/apply/spark_operations.py. Spark SQL's higher-order functions run interpreted, row by row and
 * lambda by lambda; this runs the same rules once per row as plain Java.
 *
 * <p>Arguments: the row's operations ({@code ops}, any order, redeliveries included) and its current state
 * ({@code cur}, null when the target holds no such row). The result is {@link #RESULT_TYPE}: the state after
 * the fold and the counts the job reports. Registered from Python by cdcbridge.apply.spark_fold, which also
 * holds the type names; its tests check this class against the Python fold on random histories.
 */
public final class FoldRow implements UDF2<Seq<Row>, Row, Row> {
    private static final long serialVersionUID = 1L;

    // Field positions of an operation (spark_operations.OP_TYPE) ...
    private static final int Q = 0, T = 1, P = 2, O = 3, TS = 4, D = 5, I = 6, R = 7, PA = 8, W = 9, C = 10;
    // ... of a cell (CELL_TYPE) ...
    private static final int CELL_NAME = 0, CELL_OP = 1, CELL_VALUE = 2, CELL_VERSION = 3, CELL_AMOUNT = 4;
    // ... of a current state (spark_fold.STATE_TYPE) and of a value union (VALUE_UNION: z, l, d, s, b).
    private static final int COLS = 0, DEL = 1, SEQ = 2, STATE_TS = 3;
    private static final int LONG_FIELD = 1;

    /** Sort order of a row's operations: seq_key, then a message before a tombstone, then Kafka position. */
    private static final Comparator<Row> SEQ_ORDER = Comparator
            .comparing((Row op) -> op.getString(Q))
            .thenComparing(op -> flag(op, T))
            .thenComparing(op -> op.isNullAt(P) ? Integer.MAX_VALUE : op.getInt(P))
            .thenComparing(op -> op.isNullAt(O) ? Long.MAX_VALUE : op.getLong(O));

    @Override
    public Row call(Seq<Row> ops, Row cur) {
        List<Row> received = ops == null ? List.of() : CollectionConverters.asJava(ops);
        List<Row> withSeq = new ArrayList<>(received.size());
        for (Row op : received) {
            if (!op.isNullAt(Q)) {
                withSeq.add(op);
            }
        }
        withSeq.sort(SEQ_ORDER);
        State state = new State(cur);
        int duplicates = 0;
        int stale = 0;
        String previous = null;
        for (Row op : withSeq) {
            String seq = op.getString(Q);
            if (seq.equals(previous)) {
                duplicates++;  // a redelivery: the first of each seq_key is kept
                continue;
            }
            previous = seq;
            if (state.seq != null && seq.compareTo(state.seq) <= 0) {
                stale++;  // the guard: the row already holds this operation or a newer one
                continue;
            }
            state.apply(op);
        }
        return RowFactory.create(
                state.cols, state.deleted, state.seq, state.ts,
                received.size() - withSeq.size(), duplicates, stale, state.applied, state.redundant, state.error);
    }

    /** A boolean field of an operation; null counts as false. */
    private static boolean flag(Row op, int field) {
        return !op.isNullAt(field) && op.getBoolean(field);
    }

    /** A row's state while its operations are folded onto it. */
    private static final class State {
        Map<String, Row> cols = new LinkedHashMap<>();
        boolean deleted;
        String seq;
        Long ts;
        int applied;
        int redundant;
        boolean error;

        State(Row cur) {
            deleted = true;  // an absent row is a deleted row without seq
            if (cur != null) {
                if (!cur.isNullAt(COLS)) {
                    cols.putAll(CollectionConverters.asJava(cur.<String, Row>getMap(COLS)));
                }
                deleted = !cur.isNullAt(DEL) && cur.getBoolean(DEL);
                seq = cur.isNullAt(SEQ) ? null : cur.getString(SEQ);
                ts = cur.isNullAt(STATE_TS) ? null : cur.getLong(STATE_TS);
            }
        }

        void apply(Row op) {
            boolean rowDeleted = flag(op, D);
            if (rowDeleted && flag(op, T) && deleted) {
                redundant++;  // a tombstone of a row that is already deleted changes nothing
                return;
            }
            if (rowDeleted) {
                cols = new LinkedHashMap<>();
                deleted = true;
            } else if (flag(op, I) && !flag(op, PA)) {
                Map<String, Row> image = new LinkedHashMap<>();
                for (Row cell : cells(op)) {
                    image.put(cell.getString(CELL_NAME), entry(cell.get(CELL_VALUE), version(cell)));
                }
                cols = image;
                deleted = false;
            } else if (!(deleted && !flag(op, R) && !flag(op, W))) {
                // A deleted row stays deleted (cells not applied) unless the operation replaces it or writes.
                if (flag(op, R) || (deleted && flag(op, W))) {
                    cols = new LinkedHashMap<>();
                }
                deleted = false;
                for (Row cell : cells(op)) {
                    applyCell(cell);
                }
            }
            seq = op.getString(Q);
            if (!op.isNullAt(TS)) {
                ts = op.getLong(TS);
            }
            applied++;
        }

        private void applyCell(Row cell) {
            String name = cell.getString(CELL_NAME);
            Row held = cols.get(name);
            Long heldVersion = held == null ? null : (Long) held.get(1);
            Long version = version(cell);
            String kind = cell.getString(CELL_OP);
            switch (kind == null ? "" : kind) {
                case "PUT" -> {
                    if (heldVersion == null || version == null || version >= heldVersion) {
                        cols.put(name, entry(cell.get(CELL_VALUE), version));
                    }
                }
                case "DELETE_ALL_VERSION" -> cols.remove(name);
                case "DELETE_ONE_VERSION" -> {
                    if (heldVersion != null && heldVersion.equals(version)) {
                        cols.remove(name);
                    }
                }
                case "INCREMENT" -> {
                    if (!cell.isNullAt(CELL_VALUE)) {
                        cols.put(name, entry(cell.get(CELL_VALUE), version));
                        return;
                    }
                    Row heldValue = held == null ? null : (Row) held.get(0);
                    boolean heldLong = heldValue != null && !heldValue.isNullAt(LONG_FIELD);
                    Long sum = null;
                    if ((held == null || heldLong) && !cell.isNullAt(CELL_AMOUNT)) {
                        try {
                            sum = Math.addExact(heldLong ? heldValue.getLong(LONG_FIELD) : 0L, cell.getLong(CELL_AMOUNT));
                        } catch (ArithmeticException overflow) {
                            sum = null;
                        }
                    }
                    if (sum == null) {
                        error = true;  // no integer to add to, or past int64: the reference path judges it
                    }
                    cols.put(name, entry(RowFactory.create(null, sum, null, null, null), version));
                }
                default -> { }
            }
        }

        private static List<Row> cells(Row op) {
            return op.isNullAt(C) ? List.of() : CollectionConverters.asJava(op.<Row>getSeq(C));
        }

        private static Long version(Row cell) {
            return cell.isNullAt(CELL_VERSION) ? null : cell.getLong(CELL_VERSION);
        }

        private static Row entry(Object value, Long version) {
            return RowFactory.create(value, version);
        }
    }
}
