//! `.await` on device work: [`Completion`] resolves when the work a stream or an event stands
//! for has completed (see [`crate::Stream::completion`] and [`crate::Event::completion`]).

pub use crate::core::streams::completion::Completion;
