// The kit on Express (4 and 5). Mount it before any body parser on its
// routes, or after express.raw(): the signature covers the raw bytes, so a
// body Express already parsed as JSON cannot be checked.
//
//   app.post('/guardian/fulfil', guardian(receiver))
//   app.get('/guardian/lookup/:key', guardian(receiver))

import { toRequest, writeResponse } from './node.js'

/** Express middleware answering Guardian with receiver. */
export function guardian(receiver) {
  return async (req, res, next) => {
    try {
      let body
      if (Buffer.isBuffer(req.body)) body = req.body
      else if (req.body !== undefined && req.method === 'POST' && req.readableEnded) {
        throw new Error('receiver: the request body was parsed before the receiver saw it: mount the receiver before express.json(), or use express.raw()')
      }
      await writeResponse(res, await receiver.handle(toRequest(req, body)))
    } catch (err) {
      next(err)
    }
  }
}
