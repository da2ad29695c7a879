package io.cdcbridge.spark;

import java.util.HashMap;
import java.util.Map;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.util.ArrayBasedMapData;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A folded row's cell versions as a Delta table's {@code _versions} column stores them, compiled: the row's most
 * common version (the newest of equally common ones) under the empty key, then each cell whose version differs
 * from it by name (a cell without version as null); an empty map when no cell has a version. The same rule as
 * cdcbridge/apply/targets/delta_versions.py {@code stored_versions}; {@link RowState} reads it back.
 *
 * <p>Argument: the row's columns (spark.fold.COLUMNS_TYPE: name to value union and version). Result:
 * {@code map<string,bigint>}.
 */
public final class RowVersions extends KernelExpression {
    private static final long serialVersionUID = 1L;
    private static final int CELL_FIELDS = 2, VERSION_FIELD = 1;
    static final UTF8String COMMON_VERSION_KEY = UTF8String.EMPTY_UTF8;

    public RowVersions(Expression[] arguments, DataType resultType) {
        super(arguments, 1, resultType);
    }

    @Override
    public Object compute(Object[] values) {
        MapData cols = (MapData) values[0];
        int cells = cols == null ? 0 : cols.numElements();
        Long[] versions = new Long[cells];
        Map<Long, Integer> counts = new HashMap<>();
        Long common = null;
        int commonCount = 0;
        ArrayData cellValues = cells == 0 ? null : cols.valueArray();
        for (int i = 0; i < cells; i++) {
            if (cellValues.isNullAt(i)) {
                continue;
            }
            InternalRow cell = cellValues.getStruct(i, CELL_FIELDS);
            if (cell.isNullAt(VERSION_FIELD)) {
                continue;
            }
            long version = cell.getLong(VERSION_FIELD);
            versions[i] = version;
            int count = counts.merge(version, 1, Integer::sum);
            if (count > commonCount || (count == commonCount && version > common)) {
                common = version;
                commonCount = count;
            }
        }
        if (common == null) {
            return new ArrayBasedMapData(new GenericArrayData(new Object[0]), new GenericArrayData(new Object[0]));
        }
        int others = 0;
        for (Long version : versions) {
            if (!common.equals(version)) {
                others++;
            }
        }
        Object[] names = new Object[others + 1];
        Object[] stored = new Object[others + 1];
        names[0] = COMMON_VERSION_KEY;
        stored[0] = common;
        int entry = 1;
        ArrayData columnNames = cols.keyArray();
        for (int i = 0; i < cells; i++) {
            if (!common.equals(versions[i])) {
                names[entry] = columnNames.getUTF8String(i);
                stored[entry] = versions[i];
                entry++;
            }
        }
        return new ArrayBasedMapData(new GenericArrayData(names), new GenericArrayData(stored));
    }
}
