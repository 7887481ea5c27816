import type { NextFunction, Request as ExpressRequest, Response as ExpressResponse } from 'express'
import type { Receiver } from './index.js'

/** Express middleware answering Guardian with receiver; mount it before express.json(), or after express.raw(). */
export function guardian(receiver: Receiver): (req: ExpressRequest, res: ExpressResponse, next: NextFunction) => Promise<void>
