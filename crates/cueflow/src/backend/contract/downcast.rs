//! Taking back a backend's own object from the trait object core held it as, one way for every
//! backend and object (as wgpu-hal's `dynamic` module does): the contract's object traits
//! ([`Backend`](super::device::Backend), [`BackendStream`](super::device::BackendStream),
//! [`BackendEvent`](super::event::BackendEvent), [`BackendGraph`](super::device::BackendGraph),
//! [`DoneSignal`](super::device::DoneSignal), [`BackendComm`](super::comm::BackendComm)) have
//! [`AsAny`] as a supertrait, implemented for each concrete type by [`as_any!`], and a backend
//! takes its type back with [`downcast`], whose one failure is [`Error::InvalidHandle`].
//!
//! Where an object of another backend is legitimately handed in and means "nothing for this
//! backend to do", the caller matches on the error and says why (peer access between devices of
//! two backends is never direct; a completion of another backend's device is waited for on the
//! host, [`DoneSignal::wait_here`](super::device::DoneSignal::wait_here)).

use std::any::Any;

use crate::error::{Error, Result};

/// An object a backend takes back as its concrete type.
pub(crate) trait AsAny: Any {
    /// `self`, for [`downcast`].
    fn as_any(&self) -> &dyn Any;
}

/// Implement [`AsAny`] for concrete types (never for `Arc`s or trait objects: a method call on
/// an `Arc<dyn Trait>` must reach the object, not the `Arc`).
macro_rules! as_any {
    ($($t:ty),+ $(,)?) => {
        $(
            impl $crate::backend::contract::downcast::AsAny for $t {
                fn as_any(&self) -> &dyn ::std::any::Any {
                    self
                }
            }
        )+
    };
}
pub(crate) use as_any;

/// `obj` as this backend's `T`, or [`Error::InvalidHandle`] saying that `what` (an event, a
/// graph, …) belongs to another backend.
#[inline]
pub(crate) fn downcast<'a, T: Any, O: AsAny + ?Sized>(obj: &'a O, what: &str) -> Result<&'a T> {
    obj.as_any()
        .downcast_ref::<T>()
        .ok_or_else(|| Error::InvalidHandle(format!("{what} belongs to another backend")))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Mine;
    struct Theirs;
    as_any!(Mine, Theirs);

    trait Object: AsAny {}
    impl Object for Mine {}
    impl Object for Theirs {}

    #[test]
    fn one_failure_mode_a_typed_error() {
        let mine: std::sync::Arc<dyn Object> = std::sync::Arc::new(Mine);
        let theirs: std::sync::Arc<dyn Object> = std::sync::Arc::new(Theirs);
        assert!(downcast::<Mine, _>(mine.as_ref(), "event").is_ok());
        match downcast::<Mine, _>(theirs.as_ref(), "event") {
            Err(Error::InvalidHandle(m)) => assert_eq!(m, "event belongs to another backend"),
            other => panic!("expected InvalidHandle, got {:?}", other.map(|_| ())),
        }
        // A method call through the Arc reaches the object, not the Arc.
        assert!(mine.as_any().is::<Mine>());
    }
}
