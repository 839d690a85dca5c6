package store

import (
	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
)

// TxAdapter is a business system whose data lives in countersign's own
// database, next to the store's tables (the demo ledger). Its writes can
// join the transaction that consumes the token and records the outcome:
// the protocol consumes a token before calling a business system so that a
// crash between the two can never let the token write twice; when the
// write commits with the consumption, there is no "between", and one
// commit does what three did.
type TxAdapter interface {
	models.Adapter
	// ExecuteIn performs req's write inside tx and answers as Execute
	// does. It must write only through tx and leave nothing of a write it
	// refuses (ErrStateConflict, a business rule): tx goes on to record
	// that outcome and commits. Any other error makes the caller roll the
	// whole transaction back.
	ExecuteIn(tx *gorm.DB, req models.ExecuteRequest) (models.ExecuteResult, error)
}
