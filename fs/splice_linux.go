package fs

// spliceReads: Linux splices file ranges into FUSE replies.
const spliceReads = true
