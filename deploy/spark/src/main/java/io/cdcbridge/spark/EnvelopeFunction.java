package io.cdcbridge.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;

/**
 * A compiled function of one envelope format ({@link MutationOp}, {@link ImageOp}): arguments the decoded envelope,
 * its Kafka partition and offset; result spark.operations.ENVELOPE_OP_TYPE, or null for a null or invalid envelope.
 * Where the envelope type keeps its fields ({@code L}) is worked out on the first row.
 */
abstract class EnvelopeFunction<L> extends KernelExpression {
    private static final long serialVersionUID = 1L;

    private transient L layout;

    EnvelopeFunction(Expression[] arguments, DataType resultType) {
        super(arguments, 3, resultType);
    }

    /** Where an envelope of this struct type keeps its fields. */
    abstract L layout(StructType envelope);

    /** The operation of a non-null envelope, or null when it breaks a rule. */
    abstract InternalRow operation(InternalRow envelope, L at, Integer partition, Long offset);

    @Override
    public final Object compute(Object[] values) {
        InternalRow envelope = (InternalRow) values[0];
        if (envelope == null) {
            return null;
        }
        L at = layout;
        if (at == null) {
            at = layout((StructType) argument(0).dataType());
            layout = at;
        }
        return operation(envelope, at, (Integer) values[1], (Long) values[2]);
    }
}
