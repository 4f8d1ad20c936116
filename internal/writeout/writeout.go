package writeout

// Chunk is how much Range writes at a time: on the order of a
// millisecond of a virtual disk's write bandwidth, so that a small
// fdatasync issued meanwhile waits about that long behind it.
const Chunk = 128 << 10
