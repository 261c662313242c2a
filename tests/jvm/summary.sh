#!/usr/bin/env bash
# Totals of every surefire execution of the last `mvn test` (both client
# versions), as one plain closing line: "jvm: N passed, N failed, N skipped".
# Exits 1 when the reports are missing (the build did not get to the tests).
cd "$(dirname "$0")" || exit 1
shopt -s nullglob
files=(target/surefire-reports*/TEST-*.xml)
if [ ${#files[@]} -eq 0 ]; then
  echo "jvm: no surefire reports under tests/jvm/target"
  exit 1
fi
tests=0 failed=0 skipped=0
for f in "${files[@]}"; do
  head=$(grep -m1 -o '<testsuite [^>]*>' "$f")
  attr() { sed -n "s/.* $1=\"\([0-9]*\)\".*/\1/p" <<<"$head"; }
  tests=$((tests + $(attr tests))); skipped=$((skipped + $(attr skipped)))
  failed=$((failed + $(attr failures) + $(attr errors)))
done
echo "jvm: $((tests - failed - skipped)) passed, $failed failed, $skipped skipped"
