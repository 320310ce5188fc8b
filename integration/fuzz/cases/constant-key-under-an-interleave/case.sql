-- found: --seed 23001 query 1120 (TLP)
-- mode: bloom
-- difference: Squadron failed: DataFusion error: Internal error: Assertion failed: can_interleave(children.iter()): Can not create InterleaveExec: new children can not be interleaved. This issue was likely caused by a bug in DataFusion's code. Please help us to resolve this by filing a bug report in our issue tracker: https://github.com/apache/datafusion/issues
-- table: t1 sorted
-- table: t2
WITH c AS (SELECT a0.* FROM t2 a0 WHERE a0.k2 IS NOT NULL) SELECT a2.k0 AS c0 FROM c a0 JOIN c a1 ON true LEFT JOIN t1 a2 ON a2.k0 = a0.k0 WHERE a0.k0 IN (1)
-- equals, as a multiset:
WITH c AS (SELECT a0.* FROM t2 a0 WHERE a0.k2 IS NOT NULL) SELECT a2.k0 AS c0 FROM c a0 JOIN c a1 ON true LEFT JOIN t1 a2 ON a2.k0 = a0.k0 WHERE a0.k0 IN (1) AND (a1.f < a2.f) UNION ALL SELECT a2.k0 AS c0 FROM c a0 JOIN c a1 ON true LEFT JOIN t1 a2 ON a2.k0 = a0.k0 WHERE a0.k0 IN (1) AND NOT (a1.f < a2.f) UNION ALL SELECT a2.k0 AS c0 FROM c a0 JOIN c a1 ON true LEFT JOIN t1 a2 ON a2.k0 = a0.k0 WHERE a0.k0 IN (1) AND (a1.f < a2.f) IS NULL
