//! A value swapped whole while the service runs ([`Live`]): the cell every part that follows
//! a reload holds (the allowlist's rules, the permission rules, the approval policy, the
//! settings snapshot).

use std::fmt;
use std::sync::Arc;

use arc_swap::ArcSwap;

/// A value swapped whole: readers take an `Arc` of the current one and keep it as long as they
/// need; a writer puts in a new one for the readers after it. `arc-swap` underneath, so a read
/// takes no lock and never waits on a reload.
pub struct Live<T> {
    cell: ArcSwap<T>,
}

impl<T> Live<T> {
    /// A cell holding `value`.
    pub fn new(value: T) -> Self {
        Live::from_arc(Arc::new(value))
    }

    /// A cell holding `value`, shared as it is.
    pub fn from_arc(value: Arc<T>) -> Self {
        Live {
            cell: ArcSwap::new(value),
        }
    }

    /// The current value.
    pub fn load(&self) -> Arc<T> {
        self.cell.load_full()
    }

    /// Puts `value` in force; gives back the one it replaces.
    pub fn store(&self, value: Arc<T>) -> Arc<T> {
        self.cell.swap(value)
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
