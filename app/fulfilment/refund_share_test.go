package fulfilment

import (
	"testing"

	"github.com/guardian-pay/guardian/db"
)

// TestRefundedWhole: the amounts of a payment's refunds against its paid
// amount, each refund once at its largest, a cumulative total as it says,
// another currency never counted.
func TestRefundedWhole(t *testing.T) {
	t.Parallel()
	paid := &db.Amount{Minor: 1000, Currency: "EUR"}
	share := func(id string, minor int64, cumulative bool) db.RefundShare {
		return db.RefundShare{RefundID: id, Amount: db.Amount{Minor: minor, Currency: "EUR"}, Cumulative: cumulative, Paid: paid}
	}
	other := share("re_usd", 1000, false)
	other.Amount.Currency = "USD"
	unknown := share("re_1", 1000, false)
	unknown.Paid = nil
	tests := []struct {
		name   string
		shares []db.RefundShare
		want   bool
	}{
		{"OneRefundOfAll", []db.RefundShare{share("re_1", 1000, false)}, true},
		{"OneRefundOfPart", []db.RefundShare{share("re_1", 400, false)}, false},
		{"TwoRefundsMakeAll", []db.RefundShare{share("re_1", 400, false), share("re_2", 600, false)}, true},
		{"OneRefundsTwoEventsCountOnce", []db.RefundShare{share("re_1", 500, false), share("re_1", 500, false)}, false},
		{"ACumulativeTotalOfAll", []db.RefundShare{share("", 1000, true)}, true},
		{"CumulativeAndItsRefundsCountOnce", []db.RefundShare{share("", 500, true), share("re_1", 500, false)}, false},
		{"RefundsOfAnotherCurrencyAreNotCounted", []db.RefundShare{other}, false},
		{"ThePaidAmountUnknown", []db.RefundShare{unknown}, false},
		{"RefundsWithoutIDsCountEach", []db.RefundShare{{EventPK: 1, Amount: db.Amount{Minor: 500, Currency: "EUR"}, Paid: paid}, {EventPK: 2, Amount: db.Amount{Minor: 500, Currency: "EUR"}, Paid: paid}}, true},
	}
	for _, tt := range tests {
		if got := refundedWhole(tt.shares); got != tt.want {
			t.Errorf("%s: refundedWhole = %v, want %v", tt.name, got, tt.want)
		}
	}
}
