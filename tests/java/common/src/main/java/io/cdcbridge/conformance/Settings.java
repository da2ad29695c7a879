package io.cdcbridge.conformance;

import java.util.Map;

/**
 * Where the emulator is and how to sign for it, from the environment (never the command line, so the secret does not
 * show in process lists): TABLESTORE_ENDPOINT, TABLESTORE_INSTANCE, TABLESTORE_ACCESS_KEY_ID,
 * TABLESTORE_ACCESS_KEY_SECRET, TABLESTORE_REGION (the region the emulator was started with, for V4 signatures) and
 * CONFORMANCE_TABLE_PREFIX (so two runs against one emulator use their own tables).
 */
public record Settings(
        String endpoint, String instance, String accessKeyId, String accessKeySecret, String region,
        String tablePrefix) {

    public static Settings fromEnvironment() {
        Map<String, String> env = System.getenv();
        return new Settings(
                required(env, "TABLESTORE_ENDPOINT"),
                env.getOrDefault("TABLESTORE_INSTANCE", "conformance"),
                env.getOrDefault("TABLESTORE_ACCESS_KEY_ID", "emulator-id"),
                env.getOrDefault("TABLESTORE_ACCESS_KEY_SECRET", "emulator-secret"),
                env.getOrDefault("TABLESTORE_REGION", "cn-hangzhou"),
                env.getOrDefault("CONFORMANCE_TABLE_PREFIX", "conf_"));
    }

    public String table(String name) {
        return tablePrefix + name;
    }

    private static String required(Map<String, String> env, String name) {
        String value = env.get(name);
        if (value == null || value.isBlank()) {
            throw new IllegalStateException(name + " is not set: point it at the emulator, e.g. http://127.0.0.1:8900");
        }
        return value;
    }
}
