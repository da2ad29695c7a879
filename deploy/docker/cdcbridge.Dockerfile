# One image for the emulator, the bridge workers and the Spark apply job.
# Stage 1 fetches the Spark connector jars from Maven Central and builds our Spark kernel with the same pom the
# local stack uses.
FROM maven:3.9-eclipse-temurin-17 AS jars
WORKDIR /build
COPY deploy/spark deploy/spark
COPY deploy/maven-settings.xml deploy/maven-settings.xml
RUN mvn -B -q -s deploy/maven-settings.xml -f deploy/spark/pom.xml package -Djars.dir=/opt/cdcbridge/jars \
    -Dbuild.dir=/build/target

FROM python:3.11-slim-bookworm
# Spark 4 needs a JDK 17 (SPARK-49117); curl serves the healthchecks; gcc builds the two C accelerators
# (PlainBuffer reader, MUTATE_LOG encoder: the bridge is several times slower without them).
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends openjdk-17-jdk-headless curl gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/cdcbridge/src
COPY pyproject.toml README.md ./
COPY cdcbridge ./cdcbridge
COPY schemas ./schemas
RUN pip install --no-cache-dir .
COPY --from=jars /opt/cdcbridge/jars /opt/cdcbridge/jars
ENV CDCBRIDGE__APPLY__SPARK__JARS_DIR=/opt/cdcbridge/jars \
    JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    PYTHONUNBUFFERED=1
RUN useradd --create-home --uid 10001 cdcbridge && mkdir -p /data && chown cdcbridge /data
USER cdcbridge
ENTRYPOINT ["cdcbridge"]
CMD ["--help"]
