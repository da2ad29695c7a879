package io.cdcbridge.conformance;

import com.alicloud.openservices.tablestore.model.Column;
import com.alicloud.openservices.tablestore.model.ColumnValue;
import com.alicloud.openservices.tablestore.model.PrimaryKey;
import com.alicloud.openservices.tablestore.model.RowPutChange;
import com.alicloud.openservices.tablestore.model.RowUpdateChange;
import com.alicloud.openservices.tablestore.core.utils.Pair;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The stream records a table must show, per primary key and in write order: one entry per write the service
 * acknowledged, none for a write it refused. An increment is expected as a PUT of the resulting value (what the real
 * service records; the SDK cannot even decode an INCREMENT cell in a stream record).
 */
public final class ExpectedStream {
    private final Map<String, List<String>> changesByKey = new LinkedHashMap<>();

    public void put(RowPutChange change) {
        List<String> cells = new ArrayList<>();
        for (Column column : change.getColumnsToPut()) {
            cells.add(Describe.cell(column.getName(), "PUT", column.getValue()));
        }
        add(change.getPrimaryKey(), Describe.change("PUT", cells));
    }

    /** An acknowledged update; `incremented` holds each incremented column's value after the write. */
    public void update(RowUpdateChange change, Map<String, ColumnValue> incremented) {
        List<String> cells = new ArrayList<>();
        for (Pair<Column, RowUpdateChange.Type> pair : change.getColumnsToUpdate()) {
            String name = pair.getFirst().getName();
            switch (pair.getSecond().name()) {
                case "PUT" -> cells.add(Describe.cell(name, "PUT", pair.getFirst().getValue()));
                case "DELETE" -> cells.add(Describe.cell(name, "DELETE_ONE_VERSION", null));
                case "DELETE_ALL" -> cells.add(Describe.cell(name, "DELETE_ALL_VERSION", null));
                case "INCREMENT" -> cells.add(Describe.cell(name, "PUT", incremented.get(name)));
                default -> throw new IllegalArgumentException("unknown update type " + pair.getSecond());
            }
        }
        add(change.getPrimaryKey(), Describe.change("UPDATE", cells));
    }

    public void delete(PrimaryKey primaryKey) {
        add(primaryKey, Describe.change("DELETE", List.of()));
    }

    public Map<String, List<String>> byKey() {
        return changesByKey;
    }

    public int size() {
        return changesByKey.values().stream().mapToInt(List::size).sum();
    }

    private void add(PrimaryKey primaryKey, String change) {
        changesByKey.computeIfAbsent(Describe.key(primaryKey), k -> new ArrayList<>()).add(change);
    }
}
