-- found: --seed 41001 query 2092 (differential)
-- mode: default
-- difference: 1 rows expected, 0 rows given; first difference: missing ["2", "3", "2"]; answers right with squadron.dynamic_filters = false
-- table: t0
-- table: t1 sorted
-- table: t2 sorted
SELECT a0.k2 AS c0, a0.k1 AS c1, a0.k2 AS c2 FROM t0 a0 INTERSECT SELECT a1.k2 AS c0, a0.k1 AS c1, a0.k0 AS c2 FROM t1 a0, t1 a1 WHERE a1.k0 NOT IN (SELECT a9.k0 FROM t2 a9 WHERE a9.s <> 'abc') AND a1.k0 = a0.k2
