//! A continuation an actor sends only to itself, carried inside its public message type.
//!
//! A persona's own timers and the answers it asked the LLM for, and the inference threads'
//! callbacks to the embedding and LLM workers, travel through the same mailbox as everyone
//! else's messages. Their types are private to the actor's crate; the public message type
//! carries them as a [`Private`], which only that crate can open, so a holder of the actor's
//! ref cannot forge one (what it could send instead is a value of another type, which the
//! actor drops with a warning).

use std::any::Any;
use std::fmt;

/// A value of a type private to one actor's crate.
pub struct Private(Box<dyn Any + Send>);

impl Private {
    pub fn new<T: Any + Send>(value: T) -> Self {
        Self(Box::new(value))
    }

    /// The value if it is a `T`, else the wrapper back.
    pub fn open<T: Any>(self) -> Result<T, Self> {
        self.0.downcast::<T>().map(|value| *value).map_err(Self)
    }
}

impl fmt::Debug for Private {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Private(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_as_its_own_type_only() {
        struct Mine(u32);
        let wrapped = Private::new(Mine(7));
        let wrapped = match wrapped.open::<String>() {
            Ok(_) => panic!("a Mine opened as a String"),
            Err(back) => back,
        };
        assert_eq!(wrapped.open::<Mine>().ok().map(|m| m.0), Some(7));
    }
}
