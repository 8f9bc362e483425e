//! A value swapped whole while the service runs ([`Live`]): the cell every part that follows
//! a reload holds (the allowlist's rules, the permission rules, the approval policy, the
//! settings snapshot).

use std::fmt;
use std::sync::{Arc, RwLock};

/// A value swapped whole: readers take an `Arc` of the current one and keep it as long as they
/// need; a writer puts in a new one for the readers after it. (The lock is held only to clone
/// or replace the `Arc`, never while the value is used.)
pub struct Live<T> {
    cell: RwLock<Arc<T>>,
}

impl<T> Live<T> {
    /// A cell holding `value`.
    pub fn new(value: T) -> Self {
        Live::from_arc(Arc::new(value))
    }

    /// A cell holding `value`, shared as it is.
    pub fn from_arc(value: Arc<T>) -> Self {
        Live {
            cell: RwLock::new(value),
        }
    }

    /// The current value.
    pub fn load(&self) -> Arc<T> {
        Arc::clone(
            &self
                .cell
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Puts `value` in force; gives back the one it replaces.
    pub fn store(&self, value: Arc<T>) -> Arc<T> {
        let mut cell = self
            .cell
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        std::mem::replace(&mut *cell, value)
    }
}

impl<T: Default> Default for Live<T> {
    fn default() -> Self {
        Live::new(T::default())
    }
}

impl<T: fmt::Debug> fmt::Debug for Live<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Live").field(&self.load()).finish()
    }
}
