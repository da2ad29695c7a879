package io.cdcbridge.spark;

import java.io.Serializable;
import java.lang.reflect.Constructor;
import java.util.Arrays;
import java.util.List;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeBlock;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.catalyst.expressions.codegen.JavaCode;
import org.apache.spark.sql.types.DataType;

import scala.Function1;
import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A compiled function of the apply job as a Catalyst expression rather than a Java UDF: it reads its arguments as
 * Spark holds them (InternalRow, ArrayData, MapData, UTF8String) and returns its result the same way. A Java UDF
 * has every argument converted into Row, Seq, Map and String objects and its result converted back; for the
 * fold that conversion cost more than the fold itself.
 *
 * <p>A subclass computes its result from its argument values ({@link #compute}). It takes its arguments and its
 * result type (a Spark DDL type, given at registration) in a constructor {@code (Expression[], DataType)}.
 * cdcbridge/apply/spark/kernel.py registers one by name with {@link #builder}. The generated code of a plan
 * evaluates the arguments and calls {@code compute} ({@link #doGenCode}), so the expression stays inside Spark's
 * whole-stage code generation: an expression that only interprets ({@code CodegenFallback}) takes the operator
 * holding it out of it, and that operator then copies every row it passes on.
 */
public abstract class KernelExpression extends Expression implements Serializable {
    private static final long serialVersionUID = 1L;

    private final Expression[] arguments;
    /** The arguments as Catalyst asks for them, on every walk of a plan: built once. */
    private final Seq<Expression> children;
    private final DataType resultType;

    protected KernelExpression(Expression[] arguments, int arity, DataType resultType) {
        if (arguments.length != arity) {
            throw new IllegalArgumentException(
                    getClass().getSimpleName() + " takes " + arity + " arguments, got " + arguments.length);
        }
        this.arguments = arguments.clone();
        this.children = CollectionConverters.asScala(Arrays.asList(this.arguments)).toList();
        this.resultType = resultType;
    }

    /**
     * The result for these argument values (null for a null argument), as Spark holds values: InternalRow,
     * ArrayData, MapData, UTF8String, byte[] or a boxed primitive. Public for the generated code.
     */
    public abstract Object compute(Object[] values);

    /** The expression of argument {@code index}. */
    protected final Expression argument(int index) {
        return arguments[index];
    }

    /**
     * What Spark's function registry calls to build the expression {@code className} on a call's arguments, with
     * result type {@code resultDdl}.
     */
    public static Function1<Seq<Expression>, Expression> builder(String className, String resultDdl)
            throws ReflectiveOperationException {
        Class<? extends KernelExpression> kind =
                Class.forName(className, true, KernelExpression.class.getClassLoader()).asSubclass(KernelExpression.class);
        Constructor<? extends KernelExpression> make = constructorOf(kind);
        DataType type = DataType.fromDDL(resultDdl);
        return called -> make(make, CollectionConverters.asJava(called).toArray(new Expression[0]), type);
    }

    /** The constructor {@code (Expression[], DataType)} every subclass has. */
    private static Constructor<? extends KernelExpression> constructorOf(Class<? extends KernelExpression> kind)
            throws NoSuchMethodException {
        return kind.getConstructor(Expression[].class, DataType.class);
    }

    /** A new expression by {@code constructor}; what the constructor refuses (the arity) as an argument error. */
    private static KernelExpression make(Constructor<? extends KernelExpression> constructor, Expression[] arguments,
                                         DataType resultType) {
        try {
            return constructor.newInstance(arguments, resultType);
        } catch (ReflectiveOperationException error) {
            Throwable cause = error.getCause() != null ? error.getCause() : error;
            throw new IllegalArgumentException(
                    constructor.getDeclaringClass().getName() + ": " + cause.getMessage(), cause);
        }
    }

    @Override
    public final Seq<Expression> children() {
        return children;
    }

    @Override
    public boolean nullable() {
        return true;
    }

    @Override
    public final DataType dataType() {
        return resultType;
    }

    @Override
    public final Object eval(InternalRow input) {
        Object[] values = new Object[arguments.length];
        for (int i = 0; i < arguments.length; i++) {
            values[i] = arguments[i].eval(input);
        }
        return compute(values);
    }

    /** Code that evaluates the arguments as the plan's generated code does and hands their values to compute. */
    @Override
    public final ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
        String kernel = ctx.addReferenceObj("kernel", this, KernelExpression.class.getName());
        String values = ctx.freshName("kernelArguments");
        String result = ctx.freshName("kernelResult");
        StringBuilder code = new StringBuilder();
        code.append("Object[] ").append(values).append(" = new Object[").append(arguments.length).append("];\n");
        for (int i = 0; i < arguments.length; i++) {
            ExprCode argument = arguments[i].genCode(ctx);
            DataType type = arguments[i].dataType();
            String value = CodeGenerator.isPrimitiveType(type)
                    ? CodeGenerator.boxedType(type) + ".valueOf(" + argument.value() + ")"
                    : argument.value().toString();
            code.append(argument.code()).append("\n");
            code.append("if (!").append(argument.isNull()).append(") {\n  ")
                    .append(values).append("[").append(i).append("] = ").append(value).append(";\n}\n");
        }
        String javaType = CodeGenerator.javaType(dataType());
        code.append("Object ").append(result).append(" = ").append(kernel).append(".compute(").append(values)
                .append(");\n");
        code.append("boolean ").append(ev.isNull()).append(" = ").append(result).append(" == null;\n");
        code.append(javaType).append(" ").append(ev.value()).append(" = ").append(ev.isNull()).append(" ? ")
                .append(CodeGenerator.defaultValue(dataType(), true)).append(" : (").append(CodeGenerator.boxedType(dataType()))
                .append(") ").append(result).append(";\n");
        return new ExprCode(
                new CodeBlock(CollectionConverters.asScala(List.of(code.toString())).toList(),
                        CollectionConverters.asScala(List.<JavaCode>of()).toList()),
                JavaCode.isNullVariable(ev.isNull().toString()),
                JavaCode.variable(ev.value().toString(), dataType()));
    }

    /** The same function on other arguments (Catalyst rewrites a plan's expressions by copying them), built by
     * the constructor every subclass has. */
    @Override
    public final Expression withNewChildrenInternal(IndexedSeq<Expression> newChildren) {
        try {
            return make(constructorOf(getClass()), CollectionConverters.asJava(newChildren).toArray(new Expression[0]),
                    resultType);
        } catch (NoSuchMethodException error) {
            throw new IllegalStateException(getClass().getName() + " lacks the constructor (Expression[], DataType)",
                    error);
        }
    }

    @Override
    public final int productArity() {
        return arguments.length + 1;
    }

    @Override
    public final Object productElement(int n) {
        return n < arguments.length ? arguments[n] : resultType;
    }

    @Override
    public final boolean canEqual(Object other) {
        return other != null && other.getClass() == getClass();
    }

    @Override
    public final boolean equals(Object other) {
        return canEqual(other)
                && Arrays.equals(arguments, ((KernelExpression) other).arguments)
                && resultType.equals(((KernelExpression) other).resultType);
    }

    @Override
    public final int hashCode() {
        return 31 * (31 * getClass().hashCode() + Arrays.hashCode(arguments)) + resultType.hashCode();
    }
}
