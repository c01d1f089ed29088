// The peer's job does nothing: the comparison is the queue's own cost per job, against payonce's
// drain with the in-process processor (zero latency).
module.exports = async () => {};
