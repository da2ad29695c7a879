package io.cdcbridge.conformance;

import com.alicloud.openservices.tablestore.model.ColumnValue;
import com.alicloud.openservices.tablestore.model.PrimaryKey;
import com.alicloud.openservices.tablestore.model.PrimaryKeyColumn;
import com.alicloud.openservices.tablestore.model.RecordColumn;
import com.alicloud.openservices.tablestore.model.StreamRecord;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collections;
import java.util.HexFormat;
import java.util.List;

/**
 * Stream records and expected changes as comparable text, e.g. "UPDATE [name=PUT:STRING:x, old=DELETE_ALL_VERSION]"
 * and keys as "id=a,n=1": readable in a failure message, and the same for both SDK versions (whose toString differ).
 * Cells are sorted by name and op: their order inside a record is not part of the contract.
 */
public final class Describe {
    /** Longer values (the limit checks write megabytes) are shown by their start, length and a digest. */
    private static final int LONGEST_SHOWN = 40;

    private Describe() {}

    public static String key(PrimaryKey primaryKey) {
        List<String> parts = new ArrayList<>();
        for (PrimaryKeyColumn column : primaryKey.getPrimaryKeyColumns()) {
            parts.add(column.getName() + "=" + column.getValue().toString());
        }
        return String.join(",", parts);
    }

    public static String value(ColumnValue value) {
        String text = switch (value.getType()) {
            case BINARY -> Base64.getEncoder().encodeToString(value.asBinary());
            default -> value.toString();
        };
        if (text.length() > LONGEST_SHOWN) {
            text = text.substring(0, LONGEST_SHOWN) + "...(" + text.length() + " chars, sha256 " + digest(text) + ")";
        }
        return value.getType() + ":" + text;
    }

    private static String digest(String text) {
        try {
            byte[] hash = MessageDigest.getInstance("SHA-256").digest(text.getBytes(StandardCharsets.UTF_8));
            return HexFormat.of().formatHex(hash, 0, 8);
        } catch (NoSuchAlgorithmException error) {
            throw new IllegalStateException(error);
        }
    }

    public static String cell(String name, String op, ColumnValue value) {
        return name + "=" + op + (value == null ? "" : ":" + value(value));
    }

    public static String change(String type, List<String> cells) {
        List<String> sorted = new ArrayList<>(cells);
        Collections.sort(sorted);
        return type + " " + sorted;
    }

    public static String record(StreamRecord record) {
        List<String> cells = new ArrayList<>();
        for (RecordColumn column : record.getColumns()) {
            String op = column.getColumnType().name();
            ColumnValue value = column.getColumnType() == RecordColumn.ColumnType.PUT
                    ? column.getColumn().getValue() : null;
            cells.add(cell(column.getColumn().getName(), op, value));
        }
        return change(record.getRecordType().name(), cells);
    }
}
