package store

import "context"

// checkpointLoop is the background checkpointer. Woken by the writer every
// checkpointEvery commits, it runs a PASSIVE checkpoint on its own
// connection: committed WAL frames are copied into the database file and the
// file is fsynced, concurrently with the writer's next transactions, so that
// commits do not pay for it. Once a checkpoint has caught up with the WAL,
// the writer's next transaction restarts the WAL from its beginning.
// Checkpoints never affect durability: a frame stays in the WAL until it is
// safely in the database file. The checkpointer stops in fail-stop.
func (s *Store) checkpointLoop() {
	defer close(s.ckptDone)
	for {
		select {
		case <-s.ckptWake:
		case <-s.ckptStop:
			return
		}
		if s.Err() != nil {
			continue
		}
		var busy, frames, copied int
		err := s.cdb.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied)
		if err != nil {
			s.checkpointFailures.Add(1)
		} else {
			s.checkpoints.Add(1)
		}
		if h := s.hooks.checkpointed; h != nil {
			h(err)
		}
	}
}
