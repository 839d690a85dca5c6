package store

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
)

// A move through a state to one the state machine does not allow after it
// is refused as an internal error; an allowed one moves only a proposal in
// a state the first step starts from (here: none).
func TestTransitionThroughKeepsToTheStateMachine(t *testing.T) {
	t.Parallel()
	st, err := Open("sqlite://"+filepath.Join(t.TempDir(), "t.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	err = st.db.Transaction(func(tx *gorm.DB) error {
		moved, err := transitionThrough(tx, "ten_x", "prop_x", models.StatusExecuting, models.StatusAwaitingConfirmation,
			time.Now(), "")
		if moved || !models.IsCode(err, models.EInternal) {
			t.Errorf("executing → awaiting_confirmation: moved %v, %v; want EInternal", moved, err)
		}
		moved, err = transitionThrough(tx, "ten_x", "prop_x", models.StatusExecuting, models.StatusSucceeded, time.Now(), "")
		if moved || err != nil {
			t.Errorf("executing → succeeded of no proposal: moved %v, %v", moved, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
