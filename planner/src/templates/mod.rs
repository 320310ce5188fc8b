//! Plans re-used for statements that differ only in their constants.
//!
//! A point lookup's planning (SQL, logical optimization, physical planning
//! and DataFusion's physical optimizer) is about half of what it costs the
//! coordinator, and an application sends the same lookup again and again
//! with other keys. DataFusion cannot plan a statement with placeholders
//! physically, so the first statement of a shape is planned as always and
//! its physical plan kept as a template (see `template` for which plans
//! qualify and why swapping their constants is exact); the next statements
//! of that shape take the template with their own constants swapped in,
//! after checking that the table and its files are the ones it was made
//! from. What depends on the values (the ranges pruned by the footers,
//! whether the coordinator runs it) is done again for each statement.
//!
//! Templates belong to a session (its settings shaped them) and are dropped
//! when it changes a setting. A session keeps at most
//! `TEMPLATES_PER_SESSION` shapes, the oldest dropped first; shapes found
//! not to qualify are remembered too, so that they are checked only once.

mod key;
mod template;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

pub use key::StatementKey;
pub use template::{Instance, Template};

/// Shapes one session remembers.
pub const TEMPLATES_PER_SESSION: usize = 64;

/// A session's templates, by statement shape.
#[derive(Debug, Default)]
pub struct Templates {
    /// `None`: the shape was checked and does not qualify.
    by_shape: HashMap<String, Option<Arc<Template>>>,
    /// Shapes by age, oldest first.
    order: VecDeque<String>,
    /// Changes when the session's settings do: a template planned before
    /// a change is not kept.
    generation: u64,
    /// Statements planned from a template so far.
    reused: u64,
}

impl Templates {
    /// What is known of `shape`: `None` if nothing, `Some(None)` if it
    /// does not qualify.
    pub fn get(&self, shape: &str) -> Option<Option<Arc<Template>>> {
        self.by_shape.get(shape).cloned()
    }

    /// The generation to pass to `insert` for a plan made from now on.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Remembers what planning `shape` found, unless the session changed
    /// since `generation`.
    pub fn insert(&mut self, shape: String, template: Option<Arc<Template>>, generation: u64) {
        if generation != self.generation {
            return;
        }
        if self.by_shape.insert(shape.clone(), template).is_none() {
            self.order.push_back(shape);
        }
        while self.order.len() > TEMPLATES_PER_SESSION {
            if let Some(oldest) = self.order.pop_front() {
                self.by_shape.remove(&oldest);
            }
        }
    }

    /// Forgets every shape: the session's settings changed.
    pub fn clear(&mut self) {
        self.by_shape.clear();
        self.order.clear();
        self.generation += 1;
    }

    /// Counts one statement planned from a template.
    pub fn note_reuse(&mut self) {
        self.reused += 1;
    }

    /// Statements planned from a template so far.
    pub fn reused(&self) -> u64 {
        self.reused
    }

    pub fn len(&self) -> usize {
        self.by_shape.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_shape.is_empty()
    }
}

#[cfg(test)]
mod tests;
