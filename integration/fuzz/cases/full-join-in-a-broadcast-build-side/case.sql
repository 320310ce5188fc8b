-- found: --seed 31001 query 564 (differential)
-- mode: workers
-- difference: 1 rows expected, 0 rows given; first difference: missing ["NULL"]; answers right with squadron.dynamic_filters = false
-- table: t0
-- table: t3
-- table: t4
SELECT character_length(a1.s) AS c0 FROM t0 a0 FULL JOIN (SELECT a0.* FROM t3 a0 WHERE a0.k2 IS NULL) a1 ON a1.k1 = a0.k1 JOIN t4 a2 ON a2.k2 = a1.k0
