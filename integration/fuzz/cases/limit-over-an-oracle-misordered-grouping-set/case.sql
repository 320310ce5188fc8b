-- found: --seed 82001 query 1383 (differential)
-- mode: default
-- difference: 4 rows expected, 4 rows given; first difference: row 0: expected ["NULL", "0"], given ["0", "0"]; no rewrite switched off alone answers right
-- kept: DataFusion answers this wrong ([NULL, 0] first, so its LIMIT keeps other rows); the replay checks that ours stays in order, as many rows, each among the unlimited answer's
-- table: t0
-- table: t2 sorted
SELECT a0.k1 AS c0, a1.k1 AS c1 FROM t0 a0 JOIN t2 a1 ON a1.k1 = a0.k1 GROUP BY GROUPING SETS ((a0.k1, a1.k1), (a1.k1), (a0.k1), ()) ORDER BY 1, 2 LIMIT 4
