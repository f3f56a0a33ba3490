#!/bin/bash
cd /work/main
for r in 1 2 3; do for b in $BUILDS; do
  PGBIN=/opt/pg-$b/lib/postgresql/15/bin bench/run.sh --quick --duration 5 --systems pgbus --scenarios fanout --fanout ${FANOUT:-100,1000} --no-install --out /tmp/pace/$TAG-$b-$r >/tmp/pace/$TAG-$b-$r.log 2>&1
done; done
for b in $BUILDS; do for r in 1 2 3; do echo "$b r$r: $(grep '^| pgbus' /tmp/pace/$TAG-$b-$r/results.md | cut -d'|' -f3,6-8 | tr '\n' ' ')"; done; done
