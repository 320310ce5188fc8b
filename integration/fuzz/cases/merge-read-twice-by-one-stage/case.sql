-- found: --seed 20 query 21 (differential)
-- mode: workers
-- difference: Squadron failed: DataFusion error: Internal error: stage 2 is merge-read twice by one stage. This issue was likely caused by a bug in DataFusion's code. Please help us to resolve this by filing a bug report in our issue tracker: https://github.com/apache/datafusion/issues; no rewrite switched off alone answers right
-- cause: one stage read the same merge stage twice (a subtree the cut shares between two
--   joins that ended up in one stage); readers took one range of channels per stage read
--   and refused a second (planner/src/readers.rs), now each read takes its own range.
-- table: t0 sorted
-- table: t1
-- table: t2
SELECT a1.d AS c0, a0.d AS c1, a1.d AS c2 FROM t1 a0, (SELECT a0.* FROM t0 a0 WHERE a0.k1 IS NOT NULL) a1 INTERSECT SELECT a0.d AS c0, a0.d AS c1, a0.d AS c2 FROM t1 a0 WHERE a0.k0 IN (SELECT a9.k2 FROM t2 a9 WHERE a9.s <> 'ü ü')
