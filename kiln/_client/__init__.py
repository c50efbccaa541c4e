"""The producer side: enqueue, batches, filters, bulk actions, fleet reads, queue
controls, the kind catalog and the buses. It never imports ``kiln._server``."""
