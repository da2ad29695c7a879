package io.cdcbridge.spark;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayBasedMapData;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The apply job's fold of one target row, compiled: what cdcbridge/apply/core/fold.py does, on the operation structs
 * of cdcbridge/apply/spark/operations.py. Spark SQL's higher-order functions run interpreted, row by row and
 * lambda by lambda; this runs the same rules once per row as plain Java, on Spark's own values
 * ({@link KernelExpression}).
 *
 * <p>Arguments: the row's operations ({@code ops}, any order, redeliveries included) and its current state
 * ({@code cur}, null when the target holds no such row). The result is spark.fold.RESULT_TYPE: the state after
 * the fold and the counts the job reports. Registered from Python by cdcbridge.apply.spark.fold, which also
 * holds the type names; its tests check this class against the Python fold on random histories. Values taken
 * from the arguments (cell values, column names) are returned as they are: Spark copies the result before it
 * reads the next row.
 */
public final class FoldRow extends KernelExpression {
    private static final long serialVersionUID = 1L;

    // Field positions and counts of an operation (spark.operations.OP_TYPE) ...
    private static final int Q = 0, T = 1, P = 2, O = 3, TS = 4, D = 5, I = 6, R = 7, PA = 8, W = 9, C = 10;
    private static final int OP_FIELDS = 11;
    // ... of a cell (CELL_TYPE) ...
    private static final int CELL_NAME = 0, CELL_OP = 1, CELL_VALUE = 2, CELL_VERSION = 3, CELL_AMOUNT = 4;
    private static final int CELL_FIELDS = 5;
    // ... of a current state (spark.fold.STATE_TYPE), of its columns' entries (value, version) and of a value
    // union (VALUE_UNION: z, l, d, s, b).
    private static final int COLS = 0, DEL = 1, SEQ = 2, STATE_TS = 3;
    private static final int ENTRY_FIELDS = 2;
    private static final int VALUE_FIELDS = 5, LONG_FIELD = 1;
    // Names of cdcbridge/contract.py's CellOp values (tests/unit/test_contract.py checks them).
    private static final UTF8String PUT = UTF8String.fromString("PUT");
    private static final UTF8String DELETE_ALL_VERSION = UTF8String.fromString("DELETE_ALL_VERSION");
    private static final UTF8String DELETE_ONE_VERSION = UTF8String.fromString("DELETE_ONE_VERSION");
    private static final UTF8String INCREMENT = UTF8String.fromString("INCREMENT");
    private static final ArrayData NO_CELLS = new GenericArrayData(new Object[0]);

    /** Sort order of a row's operations: seq_key, then a message before a tombstone, then Kafka position. */
    private static final Comparator<InternalRow> SEQ_ORDER = Comparator
            .comparing((InternalRow op) -> op.getUTF8String(Q))
            .thenComparing(op -> flag(op, T))
            .thenComparing(op -> op.isNullAt(P) ? Integer.MAX_VALUE : op.getInt(P))
            .thenComparing(op -> op.isNullAt(O) ? Long.MAX_VALUE : op.getLong(O));

    public FoldRow(Expression[] arguments, DataType resultType) {
        super(arguments, 2, resultType);
    }

    @Override
    public Object compute(Object[] values) {
        ArrayData opArray = (ArrayData) values[0];
        InternalRow current = (InternalRow) values[1];
        int received = opArray == null ? 0 : opArray.numElements();
        List<InternalRow> withSeq = new ArrayList<>(received);
        for (int i = 0; i < received; i++) {
            InternalRow op = opArray.getStruct(i, OP_FIELDS);
            if (!op.isNullAt(Q)) {
                withSeq.add(op);
            }
        }
        withSeq.sort(SEQ_ORDER);
        State state = new State(current);
        int duplicates = 0;
        int stale = 0;
        UTF8String previous = null;
        for (InternalRow op : withSeq) {
            UTF8String seq = op.getUTF8String(Q);
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
        return new GenericInternalRow(new Object[] {
            state.colsData(), state.deleted, state.seq, state.ts,
            received - withSeq.size(), duplicates, stale, state.applied, state.redundant, state.error});
    }

    /** A boolean field of an operation; null counts as false. */
    private static boolean flag(InternalRow op, int field) {
        return !op.isNullAt(field) && op.getBoolean(field);
    }

    /** A column's value (a value union, null for none) and version. */
    private record Entry(InternalRow value, Long version) { }

    /** A row's state while its operations are folded onto it. */
    private static final class State {
        Map<UTF8String, Entry> cols = new LinkedHashMap<>();
        boolean deleted;
        UTF8String seq;
        Long ts;
        int applied;
        int redundant;
        boolean error;

        State(InternalRow cur) {
            deleted = true;  // an absent row is a deleted row without seq
            if (cur != null) {
                if (!cur.isNullAt(COLS)) {
                    MapData map = cur.getMap(COLS);
                    ArrayData keys = map.keyArray();
                    ArrayData values = map.valueArray();
                    for (int i = 0; i < map.numElements(); i++) {
                        InternalRow entry = values.getStruct(i, ENTRY_FIELDS);
                        cols.put(keys.getUTF8String(i), new Entry(
                                entry.isNullAt(0) ? null : entry.getStruct(0, VALUE_FIELDS),
                                entry.isNullAt(1) ? null : entry.getLong(1)));
                    }
                }
                deleted = !cur.isNullAt(DEL) && cur.getBoolean(DEL);
                seq = cur.isNullAt(SEQ) ? null : cur.getUTF8String(SEQ);
                ts = cur.isNullAt(STATE_TS) ? null : cur.getLong(STATE_TS);
            }
        }

        /** The columns as Spark's map (name → (value, version)), in the order they were set. */
        MapData colsData() {
            Object[] keys = new Object[cols.size()];
            Object[] values = new Object[cols.size()];
            int i = 0;
            for (Map.Entry<UTF8String, Entry> e : cols.entrySet()) {
                keys[i] = e.getKey();
                values[i] = new GenericInternalRow(new Object[] {e.getValue().value(), e.getValue().version()});
                i++;
            }
            return new ArrayBasedMapData(new GenericArrayData(keys), new GenericArrayData(values));
        }

        void apply(InternalRow op) {
            boolean rowDeleted = flag(op, D);
            if (rowDeleted && flag(op, T) && deleted) {
                redundant++;  // a tombstone of a row that is already deleted changes nothing
                return;
            }
            if (rowDeleted) {
                cols = new LinkedHashMap<>();
                deleted = true;
            } else if (flag(op, I) && !flag(op, PA)) {
                Map<UTF8String, Entry> image = new LinkedHashMap<>();
                ArrayData cells = cells(op);
                for (int i = 0; i < cells.numElements(); i++) {
                    InternalRow cell = cells.getStruct(i, CELL_FIELDS);
                    image.put(cell.getUTF8String(CELL_NAME), new Entry(value(cell), version(cell)));
                }
                cols = image;
                deleted = false;
            } else if (!(deleted && !flag(op, R) && !flag(op, W))) {
                // A deleted row stays deleted (cells not applied) unless the operation replaces it or writes.
                if (flag(op, R) || (deleted && flag(op, W))) {
                    cols = new LinkedHashMap<>();
                }
                deleted = false;
                ArrayData cells = cells(op);
                for (int i = 0; i < cells.numElements(); i++) {
                    applyCell(cells.getStruct(i, CELL_FIELDS));
                }
            }
            seq = op.getUTF8String(Q);
            if (!op.isNullAt(TS)) {
                ts = op.getLong(TS);
            }
            applied++;
        }

        private void applyCell(InternalRow cell) {
            UTF8String name = cell.getUTF8String(CELL_NAME);
            Entry held = cols.get(name);
            Long heldVersion = held == null ? null : held.version();
            Long version = version(cell);
            UTF8String kind = cell.isNullAt(CELL_OP) ? null : cell.getUTF8String(CELL_OP);
            if (PUT.equals(kind)) {
                if (heldVersion == null || version == null || version >= heldVersion) {
                    cols.put(name, new Entry(value(cell), version));
                }
            } else if (DELETE_ALL_VERSION.equals(kind)) {
                cols.remove(name);
            } else if (DELETE_ONE_VERSION.equals(kind)) {
                if (heldVersion != null && heldVersion.equals(version)) {
                    cols.remove(name);
                }
            } else if (INCREMENT.equals(kind)) {
                if (!cell.isNullAt(CELL_VALUE)) {
                    cols.put(name, new Entry(value(cell), version));
                    return;
                }
                InternalRow heldValue = held == null ? null : held.value();
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
                cols.put(name, new Entry(new GenericInternalRow(new Object[] {null, sum, null, null, null}), version));
            }
        }

        private static ArrayData cells(InternalRow op) {
            return op.isNullAt(C) ? NO_CELLS : op.getArray(C);
        }

        private static InternalRow value(InternalRow cell) {
            return cell.isNullAt(CELL_VALUE) ? null : cell.getStruct(CELL_VALUE, VALUE_FIELDS);
        }

        private static Long version(InternalRow cell) {
            return cell.isNullAt(CELL_VERSION) ? null : cell.getLong(CELL_VERSION);
        }
    }
}
