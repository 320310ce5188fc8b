-- found: --seed 12001 query 1953 (TLP)
-- mode: bloom
-- difference: Squadron failed: DataFusion error: Internal error: Assertion failed: can_interleave(children.iter()): Can not create InterleaveExec: new children can not be interleaved. This issue was likely caused by a bug in DataFusion's code. Please help us to resolve this by filing a bug report in our issue tracker: https://github.com/apache/datafusion/issues
-- cause: key range splits under a union of joins hashed alike (an InterleaveExec),
--   which DataFusion will not rebuild over inputs split by range (finding 11)
-- table: t0 sorted
-- table: t4 sorted
SELECT a1.k0 AS c0 FROM t0 a0 JOIN t4 a1 ON a1.k0 = a0.k2
-- equals, as a multiset:
SELECT a1.k0 AS c0 FROM t0 a0 JOIN t4 a1 ON a1.k0 = a0.k2 WHERE (a0.f IS NULL) UNION ALL SELECT a1.k0 AS c0 FROM t0 a0 JOIN t4 a1 ON a1.k0 = a0.k2 WHERE NOT (a0.f IS NULL) UNION ALL SELECT a1.k0 AS c0 FROM t0 a0 JOIN t4 a1 ON a1.k0 = a0.k2 WHERE (a0.f IS NULL) IS NULL
