-- found: --seed 42001 query 2205 (differential)
-- mode: default
-- difference: 3 rows expected, 3 rows given; first difference: row 1: expected ["NULL", "NULL"], given ["25", "NULL"]; no rewrite switched off alone answers right
-- table: t3 sorted
WITH c AS (SELECT a0.* FROM t3 a0 WHERE a0.d <> DATE '2020-01-01') SELECT a1.k1 AS c0, a0.k1 AS c1 FROM c a0, c a1 WHERE a1.k1 = a0.k1 GROUP BY GROUPING SETS ((a1.k1, a0.k1), (a1.k1), ()) ORDER BY 1, 2
