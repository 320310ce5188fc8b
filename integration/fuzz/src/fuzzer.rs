//! The loop: a dataset per round, queries over it through every check in
//! every mode, and each failure reduced to a small case.

use std::path::PathBuf;
use std::time::Instant;

use crate::compare::{compare, Verdict};
use crate::data::Table;
use crate::engines::{Engines, Outcome};
use crate::generate::{self, visible};
use crate::modes::Mode;
use crate::modes::REWRITES;
use crate::oracles::Check;
use crate::query::Query;
use crate::reduce::smaller;
use crate::rng::Rng;
use crate::volatile::{self, Expect};

/// Most statements one reduction runs.
const REDUCTION_BUDGET: usize = 400;

/// Statements of one template shape a template check runs.
const TEMPLATE_STATEMENTS: usize = 3;

/// A failure, reduced.
#[derive(Debug, Clone)]
pub struct Finding {
    pub origin: String,
    pub check: String,
    pub mode: Mode,
    pub why: String,
    pub sql: String,
    pub tables: Vec<Table>,
}

#[derive(Debug, Default)]
pub struct Stats {
    pub queries: usize,
    pub statements: usize,
    pub invalid: usize,
    /// Queries whose answer has more rows than the fuzzer compares.
    pub too_large: usize,
    /// Valid queries whose answer has no row.
    pub empty: usize,
    pub metamorphic: usize,
    pub volatile: usize,
    /// Statements run to re-use plan templates (`templates.rs`).
    pub templated: usize,
    pub tolerated: Vec<String>,
}

pub struct Fuzzer {
    pub engines: Engines,
    pub modes: Vec<Mode>,
    pub stats: Stats,
    pub findings: Vec<Finding>,
    work: tempfile::TempDir,
    /// The tables installed now, and the datasets written so far.
    tables: Vec<Table>,
    written: usize,
    reduce: bool,
    /// Print every statement checked.
    pub verbose: bool,
}

impl Fuzzer {
    pub fn new(engines: Engines, modes: Vec<Mode>, reduce: bool) -> anyhow::Result<Self> {
        Ok(Self {
            engines,
            modes,
            stats: Stats::default(),
            findings: vec![],
            work: tempfile::tempdir()?,
            tables: vec![],
            written: 0,
            reduce,
            verbose: false,
        })
    }

    /// Makes `tables` the tables both engines read (files in a directory
    /// of their own: no engine's cache of footers sees old ones).
    pub async fn install(&mut self, tables: Vec<Table>) -> anyhow::Result<()> {
        let dir = self.work.path().join(format!("d{}", self.written));
        self.written += 1;
        let locations: Vec<PathBuf> = tables
            .iter()
            .map(|t| t.write(&dir))
            .collect::<anyhow::Result<_>>()?;
        self.install_at(&tables, &locations).await?;
        self.tables = tables;
        Ok(())
    }

    /// Registers `tables`, already written at `locations`.
    pub async fn install_at(
        &mut self,
        tables: &[Table],
        locations: &[PathBuf],
    ) -> anyhow::Result<()> {
        for old in std::mem::take(&mut self.tables) {
            self.engines
                .everywhere(&format!("DROP TABLE IF EXISTS {}", old.name))
                .await?;
        }
        for (table, location) in tables.iter().zip(locations) {
            self.engines
                .everywhere(&format!("DROP TABLE IF EXISTS {}", table.name))
                .await?;
            self.engines.everywhere(&table.create_sql(location)).await?;
        }
        self.tables = tables.to_vec();
        Ok(())
    }

    fn table_names(&self) -> Vec<String> {
        self.tables.iter().map(|t| t.name.clone()).collect()
    }

    /// One generated query through the differential check in every mode,
    /// then TLP and NoREC where they apply (in one mode, turn by turn).
    pub async fn query(&mut self, rng: &mut Rng, origin: &str) -> anyhow::Result<()> {
        let names = self.table_names();
        let query = generate::query(&mut rng.fork(), &names);
        self.stats.queries += 1;
        self.stats.statements += 1;
        let expected = self.engines.oracle(&query.sql()).await;
        match &expected {
            Outcome::Error(why) => {
                // An invalid query, whatever the modes would say (or one
                // whose answer is too large to compare).
                if why.starts_with(crate::engines::TOO_LARGE) {
                    self.stats.too_large += 1;
                } else {
                    self.stats.invalid += 1;
                }
                if self.verbose {
                    eprintln!("{origin} (invalid: {why}): {}", query.sql());
                }
                return Ok(());
            }
            Outcome::Rows(rows) if rows.is_empty() => self.stats.empty += 1,
            Outcome::Rows(_) => {}
        }
        if self.verbose {
            let rows = match &expected {
                Outcome::Rows(rows) => rows.len(),
                Outcome::Error(_) => 0,
            };
            eprintln!("{origin} ({rows} rows): {}", query.sql());
        }
        let mut checks: Vec<Check> = (0..self.modes.len())
            .map(|mode| Check::Differential { mode })
            .collect();
        let turn = rng.below(self.modes.len());
        let visible = visible(&query.select.from);
        let predicate = generate::predicate(&mut rng.fork(), &names, &visible);
        checks.push(Check::Tlp {
            mode: turn,
            predicate,
        });
        checks.push(Check::Norec { mode: turn });
        for check in checks {
            if !check.applies(&query) {
                continue;
            }
            if !matches!(check, Check::Differential { .. }) {
                self.stats.metamorphic += 1;
            }
            self.stats.statements += match check {
                Check::Differential { .. } => 1,
                _ => 2,
            };
            match check.run(&mut self.engines, &query, Some(&expected)).await {
                None | Some(Verdict::Same) => {}
                Some(Verdict::Tolerated(why)) => self
                    .stats
                    .tolerated
                    .push(format!("{why}\n  {}", query.sql())),
                Some(Verdict::Differs(why)) => {
                    self.found(origin, check, query.clone(), why).await?;
                }
            }
        }
        Ok(())
    }

    /// A volatile query in every mode (and on DataFusion, which must keep
    /// the invariant too, or the template is wrong).
    pub async fn volatile(&mut self, rng: &mut Rng, origin: &str) -> anyhow::Result<()> {
        let check = volatile::check(rng, &self.table_names());
        self.stats.volatile += 1;
        let whole = match &check.expect {
            Expect::Zero => None,
            Expect::Binomial { whole, .. } => self.engines.oracle(whole).await.number(),
        };
        let oracle = self.engines.oracle(&check.sql).await.number();
        if !oracle.is_some_and(|n| check.expect.holds(n, whole)) {
            anyhow::bail!(
                "DataFusion breaks the invariant of {} ({oracle:?}, whole {whole:?}): \
                 the template is wrong",
                check.sql
            );
        }
        for (index, mode) in self.modes.clone().into_iter().enumerate() {
            self.stats.statements += 1;
            let got = self.engines.squadron(index, &check.sql).await;
            let holds = got.number().is_some_and(|n| check.expect.holds(n, whole));
            if !holds {
                self.findings.push(Finding {
                    origin: origin.to_string(),
                    check: "volatile invariant".into(),
                    mode,
                    why: format!("{:?} breaks {:?} (whole: {whole:?})", got, check.expect),
                    sql: check.sql.clone(),
                    tables: self.tables.clone(),
                });
            }
        }
        Ok(())
    }

    /// Statements of one template shape with other constants, in turn, in
    /// every mode (each mode's session keeps the first one's plan and runs
    /// the others with it), each against DataFusion.
    pub async fn templates(&mut self, rng: &mut Rng, origin: &str) -> anyhow::Result<()> {
        let Some(table) = self
            .tables
            .get(rng.below(self.tables.len().max(1)))
            .cloned()
        else {
            return Ok(());
        };
        for sql in crate::templates::statements(rng, &table, TEMPLATE_STATEMENTS) {
            let expected = self.engines.oracle(&sql).await;
            if matches!(expected, Outcome::Error(_)) {
                continue;
            }
            for (index, mode) in self.modes.clone().into_iter().enumerate() {
                self.stats.templated += 1;
                self.stats.statements += 1;
                let got = self.engines.squadron(index, &sql).await;
                if let Verdict::Differs(why) = compare(&expected, &got, false) {
                    eprintln!(
                        "difference (template, {}) at {origin}: {why}\n  {sql}",
                        mode.name()
                    );
                    self.findings.push(Finding {
                        origin: origin.to_string(),
                        check: "template".into(),
                        mode,
                        why,
                        sql: sql.clone(),
                        tables: self.tables.clone(),
                    });
                }
            }
        }
        Ok(())
    }

    async fn found(
        &mut self,
        origin: &str,
        check: Check,
        query: Query,
        why: String,
    ) -> anyhow::Result<()> {
        let mode = self.modes[check.mode()];
        eprintln!(
            "difference ({}, {}) at {origin}: {why}\n  {}",
            check.name(),
            mode.name(),
            query.sql()
        );
        let (query, tables, why) = if self.reduce {
            self.reduced(&check, query, why).await?
        } else {
            (query, self.tables.clone(), why)
        };
        let why = match check {
            Check::Differential { .. } => {
                let blamed = self.blame(mode, &query).await?;
                format!("{why}; {blamed}")
            }
            _ => why,
        };
        let sql = match &check {
            Check::Tlp { predicate, .. } => format!(
                "{}\n-- equals, as a multiset:\n{}",
                query.sql(),
                crate::oracles::tlp_parts(&query, predicate)
            ),
            Check::Norec { .. } => {
                let (filtered, counted) = crate::oracles::norec_pair(&query);
                format!("{filtered}\n-- equals:\n{counted}")
            }
            Check::Differential { .. } => query.sql(),
        };
        self.findings.push(Finding {
            origin: origin.to_string(),
            check: check.name().to_string(),
            mode,
            why,
            sql,
            tables,
        });
        Ok(())
    }

    /// `query` and the tables made as small as they can be while `check`
    /// still fails; the tables installed before are installed again.
    async fn reduced(
        &mut self,
        check: &Check,
        mut query: Query,
        mut why: String,
    ) -> anyhow::Result<(Query, Vec<Table>, String)> {
        let original = self.tables.clone();
        let mut budget = REDUCTION_BUDGET;
        let started = Instant::now();
        'query: while budget > 0 {
            for candidate in smaller(&query) {
                if budget == 0 {
                    break 'query;
                }
                budget -= 1;
                if let Some(failure) = self.fails(check, &candidate).await {
                    (query, why) = (candidate, failure);
                    continue 'query;
                }
            }
            break;
        }
        let mut tables = original.clone();
        'rows: while budget > 0 {
            for (i, halves) in tables.iter().map(halves).enumerate() {
                for half in halves {
                    if budget == 0 {
                        break 'rows;
                    }
                    budget -= 1;
                    let mut candidate = tables.clone();
                    candidate[i] = half;
                    self.install(candidate.clone()).await?;
                    if let Some(failure) = self.fails(check, &query).await {
                        (tables, why) = (candidate, failure);
                        continue 'rows;
                    }
                }
            }
            break;
        }
        self.install(original).await?;
        eprintln!(
            "reduced in {:.1} s ({} statements): {}",
            started.elapsed().as_secs_f64(),
            REDUCTION_BUDGET - budget,
            query.sql()
        );
        Ok((query, tables, why))
    }

    /// Which rewrites, switched off alone in `mode`, make `query` answer
    /// as DataFusion does: where a bug report should look first.
    async fn blame(&mut self, mode: Mode, query: &Query) -> anyhow::Result<String> {
        let sql = query.sql();
        let expected = self.engines.oracle(&sql).await;
        let mut fixed = vec![];
        for (key, off) in REWRITES {
            let mut settings = mode.settings();
            settings.push(format!("SET {key} = {off}"));
            let got = self.engines.squadron_with(&settings, &sql).await?;
            if compare(&expected, &got, query.is_ordered()) == Verdict::Same {
                fixed.push(format!("{key} = {off}"));
            }
        }
        Ok(match fixed.is_empty() {
            true => "no rewrite switched off alone answers right".into(),
            false => format!("answers right with {}", fixed.join(" or with ")),
        })
    }

    async fn fails(&mut self, check: &Check, query: &Query) -> Option<String> {
        if !check.applies(query) {
            return None;
        }
        match check.run(&mut self.engines, query, None).await {
            Some(Verdict::Differs(why)) => Some(why),
            _ => None,
        }
    }
}

/// Smaller versions of a table's rows: each file's first or second half,
/// or its first file alone.
fn halves(table: &Table) -> Vec<Table> {
    if table.rows() == 0 {
        return vec![];
    }
    let mut out = vec![];
    if table.files.len() > 1 {
        out.push(Table {
            files: table.files[..1].to_vec(),
            ..table.clone()
        });
    }
    out.push(table.with_rows(|b| b.slice(0, b.num_rows() / 2)));
    out.push(table.with_rows(|b| b.slice(b.num_rows() / 2, b.num_rows() - b.num_rows() / 2)));
    out.retain(|smaller| smaller.rows() < table.rows() || smaller.files.len() < table.files.len());
    out
}
