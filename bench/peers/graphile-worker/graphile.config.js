// graphile-worker's documented high-throughput settings (website/docs/performance.md), the same as
// its own perfTest: 24 concurrent jobs per instance, a local queue of 500, completions unbatched in
// time. PEER_DATABASE_URL is set by run.sh.
module.exports = {
  worker: {
    connectionString: process.env.PEER_DATABASE_URL,
    fileExtensions: [".js"],
    concurrentJobs: 24,
    maxPoolSize: 25,
    localQueue: { size: 500, refetchDelay: { durationMs: 10 } },
    completeJobBatchDelay: 0,
    failJobBatchDelay: 0,
  },
};
