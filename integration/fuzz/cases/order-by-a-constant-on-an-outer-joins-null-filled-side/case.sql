-- found: --seed 42001 query 6734 (differential)
-- mode: partitioned
-- difference: 11750 rows expected, 11750 rows given; first difference: row 10800: expected ["NULL"], given ["1"]; no rewrite switched off alone answers right
-- table: t0 sorted
-- table: t1
-- table: t4
SELECT CASE WHEN a1.k1 > CAST(-1 AS INT) THEN a1.k1 ELSE -a1.k1 END AS c0 FROM t1 a0 JOIN (SELECT a0.* FROM t4 a0 WHERE a0.k1 BETWEEN CAST(1 AS INT) AND CAST(1 AS INT)) a1 ON true RIGHT JOIN t0 a2 ON a2.s LIKE '日%' ORDER BY 1
