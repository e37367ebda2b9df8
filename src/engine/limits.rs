//! How many calls may run at once: a global limit and one per owner. A call
//! holds its permits until it is finished (not until its HTTP response is
//! sent), so a slow or cancelled call frees its slot exactly when it ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub struct Limits {
    global: Arc<Semaphore>,
    global_max: usize,
    per_owner_max: usize,
    per_owner: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// Held while calls run; dropping it frees the slots.
#[derive(Debug)]
pub struct Permit {
    _global: OwnedSemaphorePermit,
    _owner: OwnedSemaphorePermit,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LimitExceeded {
    #[error("the service is running its maximum of {0} concurrent tool calls")]
    Global(usize),
    #[error("this owner is running its maximum of {0} concurrent tool calls")]
    Owner(usize),
    #[error("a batch may run at most {0} calls at once under the current limits")]
    TooWide(usize),
}

impl Limits {
    pub fn new(global_max: usize, per_owner_max: usize) -> Self {
        let global_max = global_max.max(1);
        Limits {
            global: Arc::new(Semaphore::new(global_max)),
            global_max,
            per_owner_max: per_owner_max.max(1),
            per_owner: Mutex::new(HashMap::new()),
        }
    }

    /// Take `n` slots for `owner` now, or say which limit is in the way.
    pub fn try_acquire(&self, owner: &str, n: usize) -> Result<Permit, LimitExceeded> {
        let widest = self.global_max.min(self.per_owner_max);
        if n > widest {
            return Err(LimitExceeded::TooWide(widest));
        }
        let owner_sem = {
            let mut map = self.per_owner.lock().expect("limits lock");
            // Forget owners with nothing running, so the map stays small.
            map.retain(|_, s| s.available_permits() < self.per_owner_max);
            map.entry(owner.to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_owner_max)))
                .clone()
        };
        let n32 = n as u32;
        let owner_permit = owner_sem
            .try_acquire_many_owned(n32)
            .map_err(|_| LimitExceeded::Owner(self.per_owner_max))?;
        let global_permit = self
            .global
            .clone()
            .try_acquire_many_owned(n32)
            .map_err(|_| LimitExceeded::Global(self.global_max))?;
        Ok(Permit {
            _global: global_permit,
            _owner: owner_permit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_and_global_limits_and_release() {
        let limits = Limits::new(3, 2);
        let a1 = limits.try_acquire("a", 1).unwrap();
        let _a2 = limits.try_acquire("a", 1).unwrap();
        assert_eq!(
            limits.try_acquire("a", 1).unwrap_err(),
            LimitExceeded::Owner(2)
        );
        let _b1 = limits.try_acquire("b", 1).unwrap();
        assert_eq!(
            limits.try_acquire("b", 1).unwrap_err(),
            LimitExceeded::Global(3)
        );
        drop(a1);
        assert!(
            limits.try_acquire("b", 1).is_ok(),
            "a finished call frees its slot"
        );
        assert_eq!(
            limits.try_acquire("c", 5).unwrap_err(),
            LimitExceeded::TooWide(2)
        );
    }
}
