//! What the per-chunk work of a [`ChunkedPipeline`](super::ChunkedPipeline) is given: the
//! chunk's device memory, where the chunk sits in the run, and its stream's scratch.

use std::ops::Range;

use crate::DeviceBuffer;

/// Where a chunk sits in a run: its index, its stream and its element range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Place {
    pub index: usize,
    pub stream: usize,
    pub range: Range<usize>,
}

/// One chunk of an in-place run ([`ChunkedPipeline::run`](super::ChunkedPipeline::run),
/// [`run_on`](super::ChunkedPipeline::run_on)): the work reads and writes
/// [`device`](Self::device), which the pipeline has filled from the input before the work and
/// copies to the output after it, in the order of the chunk's stream.
#[derive(Debug)]
pub struct Chunk<'a, T, S = ()> {
    pub(crate) place: Place,
    pub(crate) device: &'a DeviceBuffer<T>,
    pub(crate) scratch: &'a S,
}

/// One chunk of a run whose input and output differ in element type
/// ([`ChunkedPipeline::run_map`](super::ChunkedPipeline::run_map)): the work reads
/// [`input`](Self::input), which the pipeline has filled before the work, and writes
/// [`output`](Self::output), which the pipeline copies out after it.
#[derive(Debug)]
pub struct MapChunk<'a, I, O, S = ()> {
    pub(crate) place: Place,
    pub(crate) input: &'a DeviceBuffer<I>,
    pub(crate) output: &'a DeviceBuffer<O>,
    pub(crate) scratch: &'a S,
}

/// The accessors both chunk kinds share.
macro_rules! place_accessors {
    () => {
        /// Index of the chunk in the run, from 0 (chunks are enqueued in index order).
        pub fn index(&self) -> usize {
            self.place.index
        }

        /// Index of the pipeline stream the chunk runs on: `index() % streams`.
        pub fn stream_index(&self) -> usize {
            self.place.stream
        }

        /// The chunk's elements within the run's input and output, from 0.
        pub fn range(&self) -> Range<usize> {
            self.place.range.clone()
        }

        /// Elements in the chunk (never 0).
        pub fn len(&self) -> usize {
            self.place.range.len()
        }

        /// Always false: a pipeline never makes an empty chunk.
        pub fn is_empty(&self) -> bool {
            self.place.range.is_empty()
        }

        /// The scratch of the chunk's stream, made by the factory given to
        /// [`ChunkedPipelineBuilder::scratch`](super::ChunkedPipelineBuilder::scratch). Chunks on
        /// one stream run one after another and share it; chunks on other streams have their own.
        pub fn scratch(&self) -> &'a S {
            self.scratch
        }
    };
}

impl<'a, T, S> Chunk<'a, T, S> {
    place_accessors!();

    /// The chunk's device memory: input before the work, output after it.
    pub fn device(&self) -> &'a DeviceBuffer<T> {
        self.device
    }
}

impl<'a, I, O, S> MapChunk<'a, I, O, S> {
    place_accessors!();

    /// The chunk's input on the device, copied there before the work.
    pub fn input(&self) -> &'a DeviceBuffer<I> {
        self.input
    }

    /// Where the work puts the chunk's output on the device; copied out after the work.
    pub fn output(&self) -> &'a DeviceBuffer<O> {
        self.output
    }
}
