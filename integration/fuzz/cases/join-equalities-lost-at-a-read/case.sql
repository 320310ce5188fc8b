-- found: --seed 40 query 190 (TLP)
-- mode: bloom
-- difference: Squadron failed: DataFusion error: Internal error: Assertion failed: can_interleave(children.iter()): Can not create InterleaveExec: new children can not be interleaved. This issue was likely caused by a bug in DataFusion's code. Please help us to resolve this by filing a bug report in our issue tracker: https://github.com/apache/datafusion/issues
-- cause: a stage read forgot that two of its columns are equal (the keys of a join
--   below the cut); a projection above passed the join's hash partitioning on
--   through that equality, so the union over the branches was an interleave that
--   could not be rebuilt over the reads. Reads now keep classes of equal columns
--   (exec/src/plan/stage_read.rs `with_equal_columns`), as they keep constants.
-- table: t0 sorted
-- table: t1 sorted
-- table: t2 sorted
SELECT a1.k0 AS c0 FROM t0 a0 JOIN t1 a1 ON a1.k0 = a0.k0 JOIN t1 a2 ON a2.k2 = a0.k0 AND a2.k2 = a1.k2 JOIN t2 a3 ON a3.k2 = a0.k2 WHERE a1.k0 IN (SELECT a9.k2 FROM t1 a9 WHERE NOT a9.b)
-- equals, as a multiset:
SELECT a1.k0 AS c0 FROM t0 a0 JOIN t1 a1 ON a1.k0 = a0.k0 JOIN t1 a2 ON a2.k2 = a0.k0 AND a2.k2 = a1.k2 JOIN t2 a3 ON a3.k2 = a0.k2 WHERE a1.k0 IN (SELECT a9.k2 FROM t1 a9 WHERE NOT a9.b) AND (a3.k0 >= 10) UNION ALL SELECT a1.k0 AS c0 FROM t0 a0 JOIN t1 a1 ON a1.k0 = a0.k0 JOIN t1 a2 ON a2.k2 = a0.k0 AND a2.k2 = a1.k2 JOIN t2 a3 ON a3.k2 = a0.k2 WHERE a1.k0 IN (SELECT a9.k2 FROM t1 a9 WHERE NOT a9.b) AND NOT (a3.k0 >= 10) UNION ALL SELECT a1.k0 AS c0 FROM t0 a0 JOIN t1 a1 ON a1.k0 = a0.k0 JOIN t1 a2 ON a2.k2 = a0.k0 AND a2.k2 = a1.k2 JOIN t2 a3 ON a3.k2 = a0.k2 WHERE a1.k0 IN (SELECT a9.k2 FROM t1 a9 WHERE NOT a9.b) AND (a3.k0 >= 10) IS NULL
