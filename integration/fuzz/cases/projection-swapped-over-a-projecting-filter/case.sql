-- found: --seed 73001 query 1150 (TLP)
-- mode: partitioned
-- difference: 1 rows expected, 1 rows given; first difference: missing ["NULL", "4", "NULL"]
-- table: t0
-- table: t1 sorted
SELECT coalesce(a0.k0, a0.k2) AS c0, character_length(a2.s) AS c1, coalesce(a0.k0, a0.k2) AS c2 FROM t0 a0 JOIN t1 a1 ON a1.k0 = a0.k2 RIGHT JOIN t0 a2 ON a2.k0 = a0.k2
-- equals, as a multiset:
SELECT coalesce(a0.k0, a0.k2) AS c0, character_length(a2.s) AS c1, coalesce(a0.k0, a0.k2) AS c2 FROM t0 a0 JOIN t1 a1 ON a1.k0 = a0.k2 RIGHT JOIN t0 a2 ON a2.k0 = a0.k2 WHERE (a1.s < 'a_b') UNION ALL SELECT coalesce(a0.k0, a0.k2) AS c0, character_length(a2.s) AS c1, coalesce(a0.k0, a0.k2) AS c2 FROM t0 a0 JOIN t1 a1 ON a1.k0 = a0.k2 RIGHT JOIN t0 a2 ON a2.k0 = a0.k2 WHERE NOT (a1.s < 'a_b') UNION ALL SELECT coalesce(a0.k0, a0.k2) AS c0, character_length(a2.s) AS c1, coalesce(a0.k0, a0.k2) AS c2 FROM t0 a0 JOIN t1 a1 ON a1.k0 = a0.k2 RIGHT JOIN t0 a2 ON a2.k0 = a0.k2 WHERE (a1.s < 'a_b') IS NULL
