-- found: --seed 12001 query 4990 (differential)
-- mode: default
-- difference: 6 rows expected, 8 rows given; first difference: missing ["1637740.3698"]; no rewrite switched off alone answers right
-- cause: the filter holds a0.k1 constant; DataFusion 55 keeps it constant after the
--   grouping sets that NULL it and runs the final aggregate as sorted on it, so groups
--   split when their rows arrive interleaved across a shuffle (finding 12;
--   exec/src/plan/grouping_sets.rs runs such final aggregates Linear)
-- table: t2 sorted
WITH c AS (SELECT a0.* FROM t2 a0 WHERE NOT (a0.f < 0.0)) SELECT sum(a0.v * a0.v) AS c0 FROM c a0, c a1 WHERE a1.k1 IN (CAST(2 AS INT)) AND a1.k1 = a0.k1 GROUP BY GROUPING SETS ((a0.s, a0.k1), (a0.k1), (a0.s), ())
