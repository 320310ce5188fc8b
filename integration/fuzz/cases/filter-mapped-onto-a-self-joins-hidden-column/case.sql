-- found: --seed 62001 query 422 (differential)
-- mode: default
-- difference: 9 rows expected, 8 rows given; first difference: missing ["-228.5"]; answers right with squadron.dynamic_filters = false
-- table: t1
-- table: t3
SELECT DISTINCT a0.f AS c0 FROM t3 a0 JOIN t3 a2 ON a2.k2 = a0.k0 AND a2.k0 = a0.k2 JOIN t1 a3 ON a3.k1 = a0.k2
