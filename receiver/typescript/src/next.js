// The kit as Next.js App Router route handlers (and any framework whose
// handlers take a web-standard Request and return a Response: Remix,
// SvelteKit, Hono, Bun, Deno):
//
//   // app/guardian/fulfil/route.js and app/guardian/lookup/[key]/route.js
//   export const { POST, GET } = routeHandlers(receiver)
//
// Node's runtime, not the Edge runtime: the kit needs node:crypto and pg.

/** The route handlers answering Guardian with receiver: POST acts, GET looks a key up. */
export function routeHandlers(receiver) {
  const handle = (request) => receiver.handle(request)
  return { POST: handle, GET: handle }
}
