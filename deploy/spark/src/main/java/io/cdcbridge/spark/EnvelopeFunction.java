package io.cdcbridge.spark;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.api.java.UDF3;
import org.apache.spark.sql.types.StructType;

/**
 * A compiled function of one envelope format ({@link MutationOp}, {@link ImageOp}): arguments the decoded envelope,
 * its Kafka partition and offset; result spark_operations.ENVELOPE_OP_TYPE, or null for a null or invalid envelope.
 * Where the envelope type keeps its fields is worked out once per type ({@code L}). A subclass names UDF3 among
 * its own interfaces too: Spark finds a Java UDF's arity on the registered class itself.
 */
abstract class EnvelopeFunction<L> implements UDF3<Row, Integer, Long, Row> {
    private static final long serialVersionUID = 1L;

    private transient Envelope.Layouts<L> layouts;

    /** Where an envelope of this struct type keeps its fields. */
    abstract L layout(StructType envelope);

    /** The operation of a non-null envelope, or null when it breaks a rule. */
    abstract Row operation(Row envelope, L at, Integer partition, Long offset);

    @Override
    public final Row call(Row envelope, Integer partition, Long offset) {
        if (envelope == null) {
            return null;
        }
        if (layouts == null) {
            layouts = new Envelope.Layouts<>(this::layout);
        }
        return operation(envelope, layouts.of(envelope.schema()), partition, offset);
    }
}
