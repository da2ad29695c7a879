package io.cdcbridge.spark;

import java.util.HashSet;
import java.util.Locale;
import java.util.Set;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * What a folded row looks like to its target, compiled: the names and value types of its attribute columns and
 * of its primary key, and whether two of its column names differ only in case. The apply job collects these per
 * table before writing (cdcbridge/apply/spark/batch.py), so the target can add columns or refuse the batch first.
 * A Catalyst expression on Spark's own values ({@link KernelExpression}).
 *
 * <p>Arguments: the row's key (spark.operations.PK_TYPE) and its columns (spark.fold.COLUMNS_TYPE). Result:
 * spark.batch.SHAPE_TYPE. Type names are Spark's: boolean, bigint, double, string, binary.
 */
public final class RowShape extends KernelExpression {
    private static final long serialVersionUID = 1L;
    /** Type of each field of the value union (z, l, d, s, b); the primary-key union is (l, s, b). */
    private static final UTF8String[] VALUE_TYPES = names("boolean", "bigint", "double", "string", "binary");
    private static final UTF8String[] PK_TYPES = names("bigint", "string", "binary");
    private static final int NAMED_FIELDS = 2, CELL_FIELDS = 2;

    public RowShape(Expression[] arguments, DataType resultType) {
        super(arguments, 2, resultType);
    }

    @Override
    public Object compute(Object[] values) {
        ArrayData pk = (ArrayData) values[0];
        MapData cols = (MapData) values[1];
        Object[] pkShape = new Object[pk == null ? 0 : pk.numElements()];
        for (int i = 0; i < pkShape.length; i++) {
            InternalRow item = pk.getStruct(i, NAMED_FIELDS);
            InternalRow union = item.isNullAt(1) ? null : item.getStruct(1, PK_TYPES.length);
            pkShape[i] = named(item.getUTF8String(0), typeOf(union, PK_TYPES));
        }
        Object[] columns = new Object[cols == null ? 0 : cols.numElements()];
        boolean caseConflict = false;
        if (cols != null) {
            ArrayData names = cols.keyArray();
            ArrayData cells = cols.valueArray();
            Set<String> lowered = columns.length > 1 ? new HashSet<>() : null;
            for (int i = 0; i < columns.length; i++) {
                UTF8String name = names.getUTF8String(i);
                InternalRow cell = cells.isNullAt(i) ? null : cells.getStruct(i, CELL_FIELDS);
                InternalRow union = cell == null || cell.isNullAt(0) ? null : cell.getStruct(0, VALUE_TYPES.length);
                columns[i] = named(name, typeOf(union, VALUE_TYPES));
                if (lowered != null) {
                    caseConflict |= !lowered.add(name.toString().toLowerCase(Locale.ROOT));
                }
            }
        }
        return new GenericInternalRow(new Object[] {
            new GenericArrayData(columns), new GenericArrayData(pkShape), caseConflict});
    }

    private static InternalRow named(UTF8String name, UTF8String type) {
        return new GenericInternalRow(new Object[] {name, type});
    }

    /** The type of the union's first set field; the last type when none is set (as the SQL CASE it replaces). */
    private static UTF8String typeOf(InternalRow union, UTF8String[] types) {
        if (union != null) {
            for (int field = 0; field < types.length - 1; field++) {
                if (!union.isNullAt(field)) {
                    return types[field];
                }
            }
        }
        return types[types.length - 1];
    }

    private static UTF8String[] names(String... names) {
        UTF8String[] out = new UTF8String[names.length];
        for (int i = 0; i < names.length; i++) {
            out[i] = UTF8String.fromString(names[i]);
        }
        return out;
    }
}
