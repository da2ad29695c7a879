package io.cdcbridge.conformance.sdk4;

/** One stream record as a Worker's processor received it: when (a global arrival number), by whom, from where. */
record Delivery(long arrival, String workerId, String shardId, String key, long version) {}
