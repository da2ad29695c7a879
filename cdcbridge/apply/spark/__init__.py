"""The Spark path: a micro-batch decoded, folded and written in the JVM, and the session that runs it."""
