-- found: --seed 43001 query 6002 (differential)
-- mode: default
-- difference: 2 rows expected, 1 rows given; first difference: one answer is a prefix of the other; answers right with squadron.dynamic_filters = false
-- table: t1
-- table: t2 sorted
-- table: t3
SELECT a0.k2 AS c0 FROM t1 a0 JOIN t2 a1 ON true JOIN t3 a2 ON a2.k0 = a1.k0 WHERE a1.k2 IN (SELECT a9.k2 FROM t1 a9 WHERE a9.d <> DATE '2019-04-15') ORDER BY 1
