// Command stock is the tcc-order example's stock service, a participant of both protocols. Its
// table is stock(sku, available, reserved, sold).
//
//   - TCC (POST /tcc): a try reserves stock (available → reserved) or refuses when too little is
//     available, a confirm sells the reservation (reserved → sold), a cancel releases it
//     (reserved → available).
//   - Saga (POST /saga): an action deducts the stock at once (available → sold) or refuses, a
//     compensation gives it back (sold → available).
//
// Each op runs behind the participant barrier in the same PostgreSQL transaction as the stock
// change, so a duplicate does nothing, a cancel or compensation without its try or action is an
// empty rollback, and a try or action arriving after it is refused. Every applied op also writes
// a ledger row (stock_ledger), which the demo uses to prove nothing ran twice.
//
//	go run ./examples/tcc-order/stock -schema demo -seed sku-1=100,sku-2=50
package main

import "github.com/txkit/txkit/examples/tcc-order/app"

func main() { app.ParticipantMain(app.Stock()) }
