#!/usr/bin/env bash
# Builds the Kafka Streams 4.4 reference applications once (Maven; skipped when the jar and
# its lib folder are newer than pom.xml and every source) and prints their classpath:
#
#   CP="$(compare/kafka-streams/build.sh)"
#   java -Xmx256m -cp "$CP" dev.weir.compare.WordCount --bootstrap ... 
#
# Only the classpath goes to stdout; progress and errors go to stderr as one line.
# Maven resolves from ~/.m2 (Maven Central the first time). Concurrent builds wait on a lock.
set -euo pipefail

DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TARGET="$DIR/target"
STAMP="$TARGET/.built"
CLASSPATH_OUT="$TARGET/*:$TARGET/lib/*"

say() { echo "build: $*" >&2; }

up_to_date() {
    [[ -f "$STAMP" && -f "$TARGET/weir-compare-kafka-streams.jar" && -d "$TARGET/lib" ]] &&
        [[ -z "$(find "$DIR/pom.xml" "$DIR/src" -newer "$STAMP" -print -quit)" ]]
}

if ! up_to_date; then
    command -v mvn >/dev/null || { say "error: mvn not found (apt-get install maven)"; exit 1; }
    command -v java >/dev/null || { say "error: java not found (a JDK 17 is needed)"; exit 1; }
    mkdir -p "$TARGET"
    exec 9>"$TARGET/.build.lock"
    flock 9
    if ! up_to_date; then
        started=$(date +%s%3N)
        log="$TARGET/build.log"
        rm -rf "$TARGET/lib" "$STAMP"
        if ! (cd "$DIR" && mvn -q -B package dependency:copy-dependencies) >"$log" 2>&1; then
            say "error: mvn package failed (log: $log): $(grep -m1 -E 'ERROR' "$log" || tail -n1 "$log")"
            exit 1
        fi
        touch "$STAMP"
        say "built $TARGET/weir-compare-kafka-streams.jar and $(find "$TARGET/lib" -name '*.jar' | wc -l) jars in $TARGET/lib in $(($(date +%s%3N) - started)) ms"
    fi
fi
echo "$CLASSPATH_OUT"
