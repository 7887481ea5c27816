package provider

// Development webhook secrets, used only by the development profile
// (GUARDIAN_DEV=1), the demo and the load generator. They are public: a
// server started with them must never see real money.
const (
	DevStripeSecret   = "whsec_DEVELOPMENT_ONLY_stripe"
	DevStandardSecret = "whsec_REVWRUxPUE1FTlQgT05MWSBzdGFuZGFyZA=="
)
